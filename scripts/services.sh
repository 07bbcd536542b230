#!/usr/bin/env bash
# The real servers grebe talks to at scale, on 127.0.0.1 only:
#   Redis 6379, RabbitMQ 5672, PostgreSQL 5432 (role/db grebe/grebe), Kafka 9092 (KRaft,
#   controller on 9093), with a SASL_SSL listener on 9094 (SCRAM-SHA-512, SCRAM-SHA-256
#   and PLAIN, user grebe / grebe-secret) and an SSL listener requiring client
#   certificates (mTLS) on 9095; the test CA, broker and client certificates are made
#   once into ~/.cache/grebe/kafka-tls/. GREBE_KAFKA_PORT, GREBE_KAFKA_CONTROLLER_PORT,
#   GREBE_KAFKA_SASL_SSL_PORT and GREBE_KAFKA_MTLS_PORT move Kafka's ports (a second,
#   scratch broker: it gets its own storage, .cache/kafka-<port>, and pid file);
#   GREBE_KAFKA_TLS_DIR moves the certificates (tests read the same variable).
# Usage: scripts/services.sh up|down|status [redis|postgres|rabbitmq|kafka ...]
#        scripts/services.sh tools   # fetch Kafka's command-line tools only (see below)
#
# Works as root on a fresh Debian 12 machine without systemd (daemons are started
# directly, never through systemctl) and as a sudo-capable user. Idempotent: `up` on a
# running service only checks that it answers. Kafka's jars come from Maven Central once
# into ~/.cache/grebe/kafka-<version>/libs and its storage is formatted once, so reruns take seconds.
# Kafka's tools (TopicCommand, ConsumerGroupCommand: the kafka-tools jar, not part of the
# broker's) go to ~/.cache/grebe/kafka-<version>/tools; scripts/kafka-topics.sh and
# scripts/kafka-consumer-groups.sh run them, as the Kafka distribution's scripts would.
# Logs: .cache/services/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CACHE=$ROOT/.cache/services
LOGS=$CACHE/logs
KAFKA_PORT=${GREBE_KAFKA_PORT:-9092}
KAFKA_CONTROLLER_PORT=${GREBE_KAFKA_CONTROLLER_PORT:-9093}
KAFKA_SASL_SSL_PORT=${GREBE_KAFKA_SASL_SSL_PORT:-9094}
KAFKA_MTLS_PORT=${GREBE_KAFKA_MTLS_PORT:-9095}
# This checkout's broker config and storage; a broker on other ports gets its own.
if [ "$KAFKA_PORT" = 9092 ]; then KAFKA_HOME=$ROOT/.cache/kafka; KAFKA_PIDFILE=$CACHE/kafka.pid
else KAFKA_HOME=$ROOT/.cache/kafka-$KAFKA_PORT; KAFKA_PIDFILE=$CACHE/kafka-$KAFKA_PORT.pid; fi
# Test CA, broker keystore, client PEMs: machine-wide like the jars, so a test in any
# checkout can talk to the broker whichever checkout started it.
KAFKA_TLS=${GREBE_KAFKA_TLS_DIR:-${GREBE_CACHE_DIR:-$HOME/.cache/grebe}/kafka-tls}
KAFKA_TLS_PASS=grebe-tls  # of the broker's PKCS12 keystore and truststore (test only)
KAFKA_SASL_USER=grebe  # the test listener's user, for PLAIN and both SCRAM mechanisms
KAFKA_SASL_PASSWORD=grebe-secret
KAFKA_SCRAM_MARKER=$KAFKA_HOME/data/.grebe-scram-users  # the storage has the SCRAM users
KAFKA_LOG=$LOGS/kafka  # .log (log4j), .out (stdout); kafka-<port>.* for a scratch broker
[ "$KAFKA_PORT" = 9092 ] || KAFKA_LOG=$LOGS/kafka-$KAFKA_PORT
KAFKA_VERSION=${GREBE_KAFKA_VERSION:-3.9.1}
# Jars are shared by every checkout on the machine, so a fresh clone does not refetch them.
KAFKA_LIBS=${GREBE_CACHE_DIR:-$HOME/.cache/grebe}/kafka-$KAFKA_VERSION/libs
KAFKA_TOOLS=${GREBE_CACHE_DIR:-$HOME/.cache/grebe}/kafka-$KAFKA_VERSION/tools  # kafka-run-class.sh
SLF4J_VERSION=1.7.36
HOST=127.0.0.1
REDIS_PORT=6379
RABBIT_PORT=5672
PG_PORT=5432
WAIT_S=${GREBE_SERVICES_WAIT_S:-90}
ALL_SERVICES=(redis postgres rabbitmq kafka)

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
mkdir -p "$LOGS"

log() { printf '==> %s\n' "$*"; }
die() { printf 'services: error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------- helpers

port_open() {  # port_open PORT: true when something accepts TCP connections on it
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

wait_for() {  # wait_for NAME LOGFILE CHECK...: run CHECK until it passes or WAIT_S runs out
  local name=$1 logfile=$2; shift 2
  local deadline=$((SECONDS + WAIT_S))
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "services: $name did not answer within ${WAIT_S}s; last lines of $logfile:" >&2
      tail -n 30 "$logfile" >&2 2>/dev/null || true
      exit 1
    fi
    sleep 0.5
  done
}

as_user() {  # as_user USER CMD...: run a command as a system user (root or sudo)
  local user=$1; shift
  if [ "$(id -u)" -eq 0 ]; then runuser -u "$user" -- "$@"; else sudo -u "$user" -- "$@"; fi
}

pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing_packages() {  # missing_packages SERVICE: the apt packages it still needs
  case $1 in
    redis) pkg_installed redis-server || echo redis-server ;;
    postgres) pkg_installed postgresql || echo postgresql ;;
    rabbitmq) pkg_installed rabbitmq-server || echo rabbitmq-server ;;
    kafka)
      command -v java >/dev/null || echo openjdk-17-jre-headless
      command -v mvn >/dev/null || echo maven
      ;;
  esac
}

ensure_packages() {  # one `apt-get update` and one install for everything missing
  local missing=() svc
  for svc in "$@"; do
    # shellcheck disable=SC2207
    missing+=($(missing_packages "$svc"))
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt: installing ${missing[*]}"
  $SUDO apt-get update -qq
  # Forbid the packages' own service starts (policy-rc.d exit 101, as in container
  # images): they would listen on every interface; we start each daemon on $HOST below.
  local policy=/usr/sbin/policy-rc.d placed=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod +x "$policy"
    placed=1
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >"$LOGS/apt.log" 2>&1 || {
      [ $placed -eq 1 ] && $SUDO rm -f "$policy"
      tail -n 30 "$LOGS/apt.log" >&2; die "apt failed"; }
  [ $placed -eq 1 ] && $SUDO rm -f "$policy"
  return 0
}

# ---------------------------------------------------------------- redis

redis_ping() { [ "$(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }

redis_up() {
  if redis_ping; then log "redis: already running on $HOST:$REDIS_PORT"; return; fi
  mkdir -p "$CACHE/redis"
  # A test/dev cache: no snapshots, no AOF (nothing in it must outlive the server).
  redis-server --bind "$HOST" --port "$REDIS_PORT" --daemonize yes --save '' \
    --appendonly no --dir "$CACHE/redis" --pidfile "$CACHE/redis.pid" \
    --logfile "$LOGS/redis.log" 9>&-
  wait_for redis "$LOGS/redis.log" redis_ping
  log "redis: up on $HOST:$REDIS_PORT"
}

redis_down() {
  if redis_ping; then redis-cli -h "$HOST" -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true; fi
  log "redis: stopped"
}

redis_status() { redis_ping && echo "redis     up    $HOST:$REDIS_PORT" || echo "redis     down"; }

# ---------------------------------------------------------------- postgres

pg_version() { find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null | sort -V | tail -n1; }

pg_ready() { pg_isready -q -h "$HOST" -p "$PG_PORT"; }

pg_up() {
  local version; version=$(pg_version)
  [ -n "$version" ] || die "postgres: no server found under /usr/lib/postgresql"
  if ! pg_ready; then
    if ! pg_lsclusters -h 2>/dev/null | awk -v v="$version" '$1==v && $2=="main"' | grep -q .; then
      log "postgres: creating cluster $version/main"
      $SUDO pg_createcluster "$version" main -p "$PG_PORT" >"$LOGS/postgres-create.log" 2>&1 \
        || { cat "$LOGS/postgres-create.log" >&2; die "postgres: pg_createcluster failed"; }
    fi
    local port; port=$(pg_lsclusters -h | awk -v v="$version" '$1==v && $2=="main" {print $3}')
    [ "$port" = "$PG_PORT" ] || die "postgres: cluster $version/main is configured for port $port, expected $PG_PORT"
    echo "listen_addresses = '$HOST'" | $SUDO tee "/etc/postgresql/$version/main/conf.d/grebe.conf" >/dev/null
    # Without systemd, pg_ctlcluster starts the server itself, as the postgres user.
    $SUDO pg_ctlcluster "$version" main start >"$LOGS/postgres-start.log" 2>&1 9>&- || true
    wait_for postgres "/var/log/postgresql/postgresql-$version-main.log" pg_ready
  fi
  if [ "$(as_user postgres psql -p "$PG_PORT" -tAc "SELECT 1 FROM pg_roles WHERE rolname='grebe'")" != 1 ]; then
    as_user postgres psql -q -p "$PG_PORT" -c "CREATE ROLE grebe LOGIN PASSWORD 'grebe' CREATEDB" >/dev/null
  fi
  if [ "$(as_user postgres psql -p "$PG_PORT" -tAc "SELECT 1 FROM pg_database WHERE datname='grebe'")" != 1 ]; then
    as_user postgres createdb -p "$PG_PORT" -O grebe grebe
  fi
  log "postgres: up on $HOST:$PG_PORT (db grebe, user grebe)"
}

pg_down() {
  local version; version=$(pg_version)
  if [ -n "$version" ] && pg_ready; then $SUDO pg_ctlcluster "$version" main stop -m fast || true; fi
  log "postgres: stopped"
}

pg_status() { pg_ready && echo "postgres  up    $HOST:$PG_PORT" || echo "postgres  down"; }

# ---------------------------------------------------------------- rabbitmq

rabbit_env() {
  # Bind AMQP, epmd and Erlang distribution to loopback only.
  export RABBITMQ_NODE_IP_ADDRESS=$HOST RABBITMQ_NODE_PORT=$RABBIT_PORT ERL_EPMD_ADDRESS=$HOST
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

rabbit_up() {
  if port_open "$RABBIT_PORT"; then log "rabbitmq: already running on $HOST:$RABBIT_PORT"; return; fi
  rabbit_env
  # Debian's wrapper drops to the rabbitmq user; setsid keeps it alive after we exit.
  setsid nohup rabbitmq-server >"$LOGS/rabbitmq.log" 2>&1 </dev/null 9>&- &
  wait_for rabbitmq "$LOGS/rabbitmq.log" port_open "$RABBIT_PORT"
  $SUDO rabbitmq-diagnostics -q ping >/dev/null || die "rabbitmq: port open but node does not answer ping"
  log "rabbitmq: up on $HOST:$RABBIT_PORT (guest/guest)"
}

rabbit_down() {
  if port_open "$RABBIT_PORT"; then rabbit_env; $SUDO rabbitmqctl -q shutdown >/dev/null 2>&1 || true; fi
  log "rabbitmq: stopped"
}

rabbit_status() { port_open "$RABBIT_PORT" && echo "rabbitmq  up    $HOST:$RABBIT_PORT" || echo "rabbitmq  down"; }

# ---------------------------------------------------------------- kafka

kafka_fetch() {
  local marker=$KAFKA_LIBS/.complete-$KAFKA_VERSION
  [ -f "$marker" ] && return 0
  log "kafka: fetching kafka_2.13 $KAFKA_VERSION jars from Maven Central"
  mkdir -p "$KAFKA_HOME"
  rm -rf "$KAFKA_LIBS"
  cat >"$KAFKA_HOME/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>grebe</groupId><artifactId>kafka-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$KAFKA_VERSION</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>$SLF4J_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  mvn -q -B -f "$KAFKA_HOME/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$KAFKA_LIBS" >"$LOGS/kafka-fetch.log" 2>&1 \
    || { tail -n 30 "$LOGS/kafka-fetch.log" >&2; die "kafka: mvn could not fetch the jars"; }
  touch "$marker"
}

kafka_fetch_tools() {
  # The tools' own jar only: everything it needs is in the broker's libs, which the
  # wrappers put on the classpath too (its transitive set drags in Kafka Connect).
  local marker=$KAFKA_TOOLS/.complete-$KAFKA_VERSION
  [ -f "$marker" ] && return 0
  log "kafka: fetching kafka-tools $KAFKA_VERSION from Maven Central"
  mkdir -p "$KAFKA_HOME"
  rm -rf "$KAFKA_TOOLS"
  cat >"$KAFKA_HOME/tools-pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>grebe</groupId><artifactId>kafka-tools-runtime</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$KAFKA_VERSION</version></dependency>
  </dependencies>
</project>
EOF
  mvn -q -B -f "$KAFKA_HOME/tools-pom.xml" dependency:copy-dependencies -DexcludeTransitive=true \
    -DoutputDirectory="$KAFKA_TOOLS" >"$LOGS/kafka-tools-fetch.log" 2>&1 \
    || { tail -n 30 "$LOGS/kafka-tools-fetch.log" >&2; die "kafka: mvn could not fetch kafka-tools"; }
  # As the distribution's config/tools-log4j.properties: warnings to stderr, no noise.
  cat >"$KAFKA_TOOLS/tools-log4j.properties" <<EOF
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
EOF
  touch "$marker"
}

kafka_tls() {  # the test CA, broker and client certificates, made once
  [ -f "$KAFKA_TLS/.complete" ] && return 0
  log "kafka: making the test CA and certificates in $KAFKA_TLS"
  rm -rf "$KAFKA_TLS"
  mkdir -p "$KAFKA_TLS"
  # Leaf extensions as Python's strict X.509 verification wants them (key identifiers,
  # CA:FALSE); the broker's names cover how clients dial it (127.0.0.1, localhost).
  local leaf="basicConstraints=critical,CA:FALSE
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
keyUsage=critical,digitalSignature,keyEncipherment"
  (
    cd "$KAFKA_TLS"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=grebe test CA" \
      -keyout ca.key -out ca.pem
    printf '%s\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:%s,DNS:localhost\n' \
      "$leaf" "$HOST" >broker.ext
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile broker.ext -out broker.pem
    printf '%s\nextendedKeyUsage=clientAuth\n' "$leaf" >client.ext
    openssl req -newkey rsa:2048 -nodes -subj "/CN=grebe-client" -keyout client.key -out client.csr
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile client.ext -out client.pem
    # The broker reads PKCS12: its key and chain, and a truststore holding the CA.
    openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
      -out broker.p12 -passout "pass:$KAFKA_TLS_PASS"
    keytool -importcert -noprompt -alias grebe-ca -file ca.pem -keystore truststore.p12 \
      -storetype PKCS12 -storepass "$KAFKA_TLS_PASS"
    rm -f ./*.csr ./*.ext ca.srl
  ) >"$LOGS/kafka-tls.log" 2>&1 || { cat "$LOGS/kafka-tls.log" >&2; die "kafka: certificates failed"; }
  touch "$KAFKA_TLS/.complete"
}

kafka_configure() {
  mkdir -p "$KAFKA_HOME/data"
  cat >"$KAFKA_HOME/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT,SASL_SSL://$HOST:$KAFKA_SASL_SSL_PORT,MTLS://$HOST:$KAFKA_MTLS_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT,SASL_SSL://$HOST:$KAFKA_SASL_SSL_PORT,MTLS://$HOST:$KAFKA_MTLS_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL
# SASL_SSL: PLAIN (users in the JAAS line) and SCRAM (users stored in the cluster
# metadata by kafka_scram_users); MTLS: TLS with a client certificate required.
listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$KAFKA_SASL_USER="$KAFKA_SASL_PASSWORD";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.mtls.ssl.client.auth=required
ssl.keystore.type=PKCS12
ssl.keystore.location=$KAFKA_TLS/broker.p12
ssl.keystore.password=$KAFKA_TLS_PASS
ssl.key.password=$KAFKA_TLS_PASS
ssl.truststore.type=PKCS12
ssl.truststore.location=$KAFKA_TLS/truststore.p12
ssl.truststore.password=$KAFKA_TLS_PASS
log.dirs=$KAFKA_HOME/data
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
log.retention.hours=24
log.segment.bytes=67108864
EOF
  cat >"$KAFKA_HOME/log4j.properties" <<EOF
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$KAFKA_LOG.log
log4j.appender.file.MaxFileSize=10MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
EOF
}

kafka_java() {
  java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j.configuration="file:$KAFKA_HOME/log4j.properties" -cp "$KAFKA_LIBS/*" "$@"
}

kafka_format() {
  [ -f "$KAFKA_HOME/data/meta.properties" ] && return 0
  log "kafka: formatting KRaft storage"
  local cluster_id; cluster_id=$(kafka_java kafka.tools.StorageTool random-uuid)
  # Fresh storage gets the SCRAM users at format time (no extra JVM after start).
  kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_HOME/server.properties" \
    --add-scram "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" \
    --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" \
    >"$KAFKA_LOG-format.log" 2>&1 || { cat "$KAFKA_LOG-format.log" >&2; die "kafka: format failed"; }
  touch "$KAFKA_SCRAM_MARKER"
}

kafka_metadata() {  # a real metadata request, not just an open port
  if [ -x "$ROOT/.venv/bin/python" ]; then
    "$ROOT/.venv/bin/python" - "$HOST:$KAFKA_PORT" <<'EOF'
import asyncio, sys
from aiokafka.admin import AIOKafkaAdminClient

async def main() -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.list_topics()
    finally:
        await admin.close()

asyncio.run(main())
EOF
  else
    kafka_java kafka.admin.BrokerApiVersionsCommand --bootstrap-server "$HOST:$KAFKA_PORT"
  fi
}

kafka_pid() {  # the pid of this checkout's broker (its command line names our config)
  local pid
  pid=$(cat "$KAFKA_PIDFILE" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$KAFKA_HOME/server.properties" || return 1
  echo "$pid"
}

kafka_secure_listeners() { port_open "$KAFKA_SASL_SSL_PORT" && port_open "$KAFKA_MTLS_PORT"; }

kafka_scram_users() {
  # KRaft keeps SCRAM credentials in the cluster metadata. Storage formatted by an
  # older script has none: they are added once through the PLAINTEXT listener.
  [ -f "$KAFKA_SCRAM_MARKER" ] && return 0
  log "kafka: adding SCRAM-SHA-256/512 user $KAFKA_SASL_USER"
  local mechanism
  for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do  # one per request (the API refuses two)
    kafka_java kafka.admin.ConfigCommand --bootstrap-server "$HOST:$KAFKA_PORT" --alter \
      --entity-type users --entity-name "$KAFKA_SASL_USER" \
      --add-config "$mechanism=[password=$KAFKA_SASL_PASSWORD]" >"$KAFKA_LOG-scram.log" 2>&1 \
      || { cat "$KAFKA_LOG-scram.log" >&2; die "kafka: adding $mechanism user failed"; }
  done
  # A broker started from another checkout is reused: this one's data dir may not exist.
  mkdir -p "$(dirname "$KAFKA_SCRAM_MARKER")"
  touch "$KAFKA_SCRAM_MARKER"
}

kafka_up() {
  kafka_fetch_tools  # also when the broker is already up: the tools came after it
  kafka_tls
  if kafka_pid >/dev/null || port_open "$KAFKA_PORT"; then
    if kafka_secure_listeners; then
      wait_for kafka "$KAFKA_LOG.log" kafka_metadata
      kafka_scram_users
      log "kafka: already running on $HOST:$KAFKA_PORT (SASL_SSL $KAFKA_SASL_SSL_PORT, mTLS $KAFKA_MTLS_PORT)"
      return
    fi
    # Started by an older services.sh: only PLAINTEXT. Restart it with the new config.
    kafka_pid >/dev/null || die "kafka: $HOST:$KAFKA_PORT answers but has no SASL_SSL listener on \
$KAFKA_SASL_SSL_PORT / mTLS listener on $KAFKA_MTLS_PORT, and it was not started by this checkout \
($KAFKA_PIDFILE): run scripts/services.sh up kafka from the checkout that started it, or give \
this one other ports (GREBE_KAFKA_PORT, GREBE_KAFKA_CONTROLLER_PORT, GREBE_KAFKA_SASL_SSL_PORT, GREBE_KAFKA_MTLS_PORT)"
    log "kafka: running without the SASL_SSL/mTLS listeners (an older services.sh): restarting"
    kafka_down
  fi
  kafka_fetch
  kafka_configure
  kafka_format
  # setsid/nohup exec in place, so $! is the JVM's pid.
  setsid nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j.configuration="file:$KAFKA_HOME/log4j.properties" -cp "$KAFKA_LIBS/*" \
    kafka.Kafka "$KAFKA_HOME/server.properties" >"$KAFKA_LOG.out" 2>&1 </dev/null 9>&- &
  echo $! >"$KAFKA_PIDFILE"
  wait_for kafka "$KAFKA_LOG.out" port_open "$KAFKA_PORT"
  wait_for kafka "$KAFKA_LOG.log" kafka_metadata
  wait_for kafka "$KAFKA_LOG.out" kafka_secure_listeners
  kafka_scram_users
  log "kafka: up on $HOST:$KAFKA_PORT ($KAFKA_VERSION, KRaft; SASL_SSL $KAFKA_SASL_SSL_PORT, mTLS $KAFKA_MTLS_PORT)"
}

kafka_down() {
  local pid
  if pid=$(kafka_pid); then
    kill -TERM "$pid"
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null; do
      if [ "$SECONDS" -ge "$deadline" ]; then kill -KILL "$pid" 2>/dev/null || true; break; fi
      sleep 0.5
    done
  fi
  rm -f "$KAFKA_PIDFILE"
  log "kafka: stopped"
}

kafka_status() {
  local pid
  local secure="no SASL_SSL/mTLS listeners: run up kafka"
  kafka_secure_listeners && secure="SASL_SSL $KAFKA_SASL_SSL_PORT, mTLS $KAFKA_MTLS_PORT"
  if pid=$(kafka_pid) && port_open "$KAFKA_PORT"; then echo "kafka     up    $HOST:$KAFKA_PORT (pid $pid; $secure)"
  elif port_open "$KAFKA_PORT"; then echo "kafka     up    $HOST:$KAFKA_PORT (not started by this script; $secure)"
  else echo "kafka     down"; fi
}

# ---------------------------------------------------------------- main

fn_prefix() { case $1 in postgres) echo pg ;; rabbitmq) echo rabbit ;; *) echo "$1" ;; esac; }

action=${1:-}
shift || true
services=("$@")
[ ${#services[@]} -eq 0 ] && services=("${ALL_SERVICES[@]}")
for svc in "${services[@]}"; do
  case $svc in redis|postgres|rabbitmq|kafka) ;; *) die "unknown service '$svc' (redis, postgres, rabbitmq, kafka)";; esac
done

# One `up`/`down` at a time: concurrent test sessions may all call `up`. Daemons are
# started with fd 9 closed so they do not inherit (and hold) the lock.
exec 9>"$CACHE/.lock"

case $action in
  up)
    flock 9
    start=$SECONDS
    ensure_packages "${services[@]}"
    for svc in "${services[@]}"; do "$(fn_prefix "$svc")_up"; done
    log "services up in $((SECONDS - start))s"
    ;;
  down)
    flock 9
    for svc in "${services[@]}"; do "$(fn_prefix "$svc")_down"; done
    ;;
  status)
    for svc in "${services[@]}"; do "$(fn_prefix "$svc")_status"; done
    ;;
  tools)
    flock 9
    ensure_packages kafka
    kafka_fetch
    kafka_fetch_tools
    ;;
  *)
    echo "usage: $0 up|down|status [redis|postgres|rabbitmq|kafka ...] | tools" >&2
    exit 2
    ;;
esac
