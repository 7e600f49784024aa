#!/bin/sh
# deploy/kafka.sh DATA_DIR HOST:PORT
#
# One Kafka broker for a single-node spikehunt: KRaft, the broker and its
# controller in one JVM, from the jars this repository pins
# (deps/versions.env, fetched by deps/install.sh kafka). HOST:PORT is the
# listener the agents and the ingest reach: SASL_SSL, so nothing reaches
# it without TLS and the password. The controller listens on
# 127.0.0.1:PORT+1. Runs in the foreground (logs on stdout) until stopped.
# Topics are created on first use, one partition, replication factor 1.
#
# The first run makes, under DATA_DIR:
#   tls/       a certificate authority of its own and the broker's
#              certificate for HOST (openssl);
#   client/    what every client needs: ca.pem, the authority to check the
#              broker against, and password, user spikehunt's SCRAM-SHA-512
#              password (mode 0600). Copy both to every host.
#   data/      the log, formatted with that user.
# Later runs reuse all three; a HOST the certificate does not name gets a
# new certificate from the same authority.
set -eu
if [ $# -ne 2 ]; then
	echo "usage: deploy/kafka.sh DATA_DIR HOST:PORT   (HOST:PORT is the address every agent reaches)" >&2
	exit 2
fi
dir=$1
addr=$2
port=${addr##*:}
case $port in
'' | *[!0-9]*) echo "deploy/kafka.sh: $addr has no port: want HOST:PORT, e.g. 10.0.0.5:9092" >&2; exit 2 ;;
esac
controller=127.0.0.1:$((port + 1))
host=${addr%:*}
command -v java >/dev/null || { echo "deploy/kafka.sh: java not found: install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)" >&2; exit 1; }
command -v openssl >/dev/null || { echo "deploy/kafka.sh: openssl not found: it makes the broker's TLS certificate (Debian: apt-get install openssl)" >&2; exit 1; }

root=$(cd "$(dirname "$0")/.." && pwd)
libs=${SPIKEHUNT_KAFKA_LIBS:-}
if [ -z "$libs" ]; then
	"$root/deps/install.sh" kafka >&2
	libs=$("$root/deps/install.sh" env | sed -n 's/^SPIKEHUNT_KAFKA_LIBS=//p')
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -f "$dir/data/meta.properties" ] && [ ! -f "$dir/client/password" ]; then
	echo "deploy/kafka.sh: $dir/data was formatted by an older deploy/kafka.sh, without a user and a password: move it aside to start afresh (the topics hold only what the ingest has not yet stored)" >&2
	exit 1
fi

# The authority, the broker's certificate for $host, the client's files;
# server.properties below holds the password too: owner only.
umask 077
mkdir -p "$dir/tls" "$dir/client"
if [ ! -f "$dir/tls/ca.key" ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=spikehunt Kafka CA" -keyout "$dir/tls/ca.key" -out "$dir/tls/ca.pem" 2>/dev/null
	rm -f "$dir/tls/broker.pem"
fi
case $host in
*[!0-9.]*) san="DNS:$host" ;;
*) san="IP:$host" ;;
esac
if [ ! -f "$dir/tls/broker.pem" ] || [ "$(cat "$dir/tls/broker.host" 2>/dev/null)" != "$host" ]; then
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$host" \
		-keyout "$dir/tls/broker.key" -out "$dir/tls/broker.csr" 2>/dev/null
	printf 'subjectAltName=%s,IP:127.0.0.1,DNS:localhost\n' "$san" >"$dir/tls/broker.ext"
	openssl x509 -req -in "$dir/tls/broker.csr" -CA "$dir/tls/ca.pem" -CAkey "$dir/tls/ca.key" -CAcreateserial \
		-days 3650 -extfile "$dir/tls/broker.ext" -out "$dir/tls/broker.pem" 2>/dev/null
	cat "$dir/tls/broker.key" "$dir/tls/broker.pem" >"$dir/tls/keystore.pem"
	echo "$host" >"$dir/tls/broker.host"
fi
cp "$dir/tls/ca.pem" "$dir/client/ca.pem"
if [ ! -f "$dir/client/password" ]; then
	openssl rand -hex 24 >"$dir/client/password"
fi
password=$(cat "$dir/client/password")

cat >"$dir/server.properties" <<PROPS
# written by deploy/kafka.sh on each start
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$controller
listeners=SASL_SSL://$addr,CONTROLLER://$controller
advertised.listeners=SASL_SSL://$addr
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="spikehunt" password="$password";
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$dir/tls/keystore.pem
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$dir/tls/ca.pem
log.dirs=$dir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
# One broker cannot hold the internal topics' default three replicas;
# with them, consumer groups and transactions (the ingest's) hang.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=48
PROPS
cat >"$dir/log4j.properties" <<'PROPS'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.Target=System.out
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.common.config.AbstractConfig=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
PROPS
cat >"$dir/log4j2.properties" <<'PROPS'
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.target = SYSTEM_OUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
PROPS

jvm="-Xmx${KAFKA_HEAP:-1g} -Xms64m -Djava.awt.headless=true -Dlog4j.configuration=file:$dir/log4j.properties -Dlog4j2.configurationFile=$dir/log4j2.properties"
if [ ! -f "$dir/data/meta.properties" ]; then
	id=$(java $jvm -cp "$libs/*" kafka.tools.StorageTool random-uuid)
	java $jvm -cp "$libs/*" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" --standalone \
		--add-scram "SCRAM-SHA-512=[name=spikehunt,password=$password]"
	echo "deploy/kafka.sh: clients log in as spikehunt (SCRAM-SHA-512) with $dir/client/password, over TLS checked against $dir/client/ca.pem: copy both to every host" >&2
fi
exec java $jvm -cp "$libs/*" kafka.Kafka "$dir/server.properties"
