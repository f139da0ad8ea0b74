FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY a2a_continue ./a2a_continue
COPY sql ./sql
RUN pip install --no-cache-dir . && useradd --system gateway
USER gateway
EXPOSE 8080
CMD ["a2a-continue", "serve", "--host", "0.0.0.0", "--port", "8080"]
