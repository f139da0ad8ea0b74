"""An async gateway in front of A2A agents."""
