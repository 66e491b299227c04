# One ZooKeeper server of an ensemble, from Debian's packages (libzookeeper-java is the server
# jar of Debian's zookeeper source package; the `zookeeper` binary package would pull a full
# desktop JRE): the zookeeper role of packaging/dependencies. Configured by the environment:
# ZK_ID (1..255) and ZK_SERVERS (host names in id order, comma-separated). Context: the
# repository root (.dockerignore sends the dependency list and the entrypoint).
ARG BASE_IMAGE=debian:12-slim

# The packages to install, in a file that changes only when they do: the install layer below
# stays cached while other lines of the list change.
FROM ${BASE_IMAGE} AS packages
COPY packaging/dependencies packaging/list-dependencies /deps/
RUN /deps/list-dependencies zookeeper >/packages

FROM ${BASE_IMAGE}
COPY --from=packages /packages /tmp/packages
# The JRE's postinst links a man page; slim images have no man directories.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      $(cat /tmp/packages) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/packages \
 && useradd --system --user-group --home-dir /var/lib/zookeeper --shell /usr/sbin/nologin zookeeper \
 && install -d -o zookeeper -g zookeeper /var/lib/zookeeper
COPY docker/zookeeper-entrypoint /usr/local/bin/zookeeper-entrypoint
VOLUME /var/lib/zookeeper
USER zookeeper
EXPOSE 2181 2888 3888
HEALTHCHECK --interval=3s --timeout=2s --start-period=20s --retries=5 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/2181 && printf ruok >&3 && [ \"$(cat <&3)\" = imok ]"]
ENTRYPOINT ["zookeeper-entrypoint"]
