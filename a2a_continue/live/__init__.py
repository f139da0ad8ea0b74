"""Live tasks: following what agents do between the calls callers make."""
