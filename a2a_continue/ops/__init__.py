"""Operations: serving, start-up checks, the embedded PostgreSQL, the demo, the sample agent."""
