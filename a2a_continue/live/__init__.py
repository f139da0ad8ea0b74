"""Live tasks: updates an agent reports while a task runs, streams and their fan-out, and the
watcher that follows the tasks an agent leaves running."""
