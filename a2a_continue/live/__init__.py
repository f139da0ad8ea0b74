"""Live tasks: updates an agent reports while a task runs, streams, and their fan-out."""
