# One ZooKeeper server of an ensemble, from Debian's packages (libzookeeper-java is the server
# jar of Debian's zookeeper source package; the `zookeeper` binary package would pull a full
# desktop JRE). Configured by the environment: ZK_ID (1..255) and ZK_SERVERS (host names in id
# order, comma-separated). Context: docker/.
ARG BASE_IMAGE=debian:12-slim
FROM ${BASE_IMAGE}
# The JRE's postinst links a man page; slim images have no man directories.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      default-jre-headless libzookeeper-java libslf4j-java \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --system --user-group --home-dir /var/lib/zookeeper --shell /usr/sbin/nologin zookeeper \
 && install -d -o zookeeper -g zookeeper /var/lib/zookeeper
COPY zookeeper-entrypoint /usr/local/bin/zookeeper-entrypoint
VOLUME /var/lib/zookeeper
USER zookeeper
EXPOSE 2181 2888 3888
HEALTHCHECK --interval=3s --timeout=2s --start-period=20s --retries=5 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/2181 && printf ruok >&3 && [ \"$(cat <&3)\" = imok ]"]
ENTRYPOINT ["zookeeper-entrypoint"]
