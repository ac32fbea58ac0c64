FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY advisor advisor
COPY probes probes
COPY rules rules
COPY templates templates
RUN pip install --no-cache-dir .
CMD ["advisor", "--help"]
