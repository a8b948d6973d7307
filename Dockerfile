# DeltaMQ's image: the broker (deltamq serve), Spark 4 with Delta and S3A (master,
# worker, Spark Connect: deltamq spark serve) and JupyterLab with the notebooks.
# docker-compose.yml runs every service of the stack from it; see docs/docker-compose.md.
#
#   docker build -t deltamq .
#   docker run --rm -p 5671-5673:5671-5673 -p 8080:8080 deltamq   # the broker alone, data in the container
#
# Ports: 5672 AMQP, 5671 AMQP over TLS (a development certificate is made at first start in
# /data/tls: its CA certificate is /data/tls/amqps-ca.pem), 5673 AMQP over WebSocket, 8080 HTTP.
FROM python:3.11-slim-bookworm

# Spark 4 runs on Java 17; javac builds DeltaMQ's Delta log store (lakehouse/jvm);
# Maven fetches Delta's and S3A's jars (once, below); tini reaps Spark's children
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven tini procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")" /opt/java
# SPARK_WORKER_DIR: a worker's scratch space (pyspark's own directory is not writable)
ENV JAVA_HOME=/opt/java \
    SPARK_WORKER_DIR=/opt/deltamq/work \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/deltamq
# the project from this clone (pip install .), with the notebooks' extra (matplotlib,
# ipykernel, JupyterLab); pyspark's Spark Connect client (the notebooks use
# SPARK_REMOTE) is among the project's pinned dependencies
COPY pyproject.toml README.md ./
COPY broker broker
COPY lakehouse lakehouse
COPY mgmt mgmt
RUN pip install ".[notebooks]" && rm -rf build *.egg-info
COPY conf conf
COPY docker docker
COPY notebooks notebooks

RUN useradd --create-home --uid 1000 deltamq \
 && mkdir -p /data /opt/deltamq/work \
 && chown -R deltamq:deltamq /data /opt/deltamq/notebooks /opt/deltamq/work
USER deltamq
# Delta's jars, S3A's (hadoop-aws and the AWS SDK modules it uses) and the log store
# jar, into ~/.m2 and ~/.cache/deltamq: containers start without fetching anything
RUN python -c "from lakehouse.delta_jars import delta_jars; \
from lakehouse.spark import log_store_jar; \
from lakehouse.spark_object_store import object_store_jars; \
log_store_jar(delta_jars()); object_store_jars()"

EXPOSE 5671 5672 5673 8080
VOLUME ["/data"]
ENTRYPOINT ["tini", "--", "/opt/deltamq/docker/entrypoint.sh"]
CMD ["deltamq", "serve", "--data-dir", "/data"]
