"""The tests of a2a_continue, in folders named after the layers they test."""
