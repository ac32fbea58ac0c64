# The advisor's image: the CLI and `advisor serve`. No engine inside: it watches engines elsewhere.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY advisor advisor
COPY probes probes
COPY rules rules
COPY templates templates
RUN pip install --no-cache-dir . && useradd --system --home /var/lib/advisor advisor \
    && mkdir -p /var/lib/advisor && chown advisor /var/lib/advisor
USER advisor
ENV ADVISOR_DATA_DIR=/var/lib/advisor
EXPOSE 8080
CMD ["advisor", "--help"]
