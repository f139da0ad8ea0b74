"""Helpers of the tests: servers, clients, fake and real agents, processes, bounded waits."""
