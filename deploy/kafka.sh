#!/bin/sh
# deploy/kafka.sh DATA_DIR HOST:PORT
#
# One Kafka broker for a single-node spikehunt: KRaft, the broker and its
# controller in one JVM, from the jars this repository pins
# (deps/versions.env, fetched by deps/install.sh kafka). HOST:PORT is the
# plaintext listener the agents and the ingest reach; the controller
# listens on 127.0.0.1:PORT+1. The first run formats DATA_DIR/data; later
# runs reuse it. Runs in the foreground (logs on stdout) until stopped.
# Topics are created on first use, one partition, replication factor 1.
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
command -v java >/dev/null || { echo "deploy/kafka.sh: java not found: install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)" >&2; exit 1; }

root=$(cd "$(dirname "$0")/.." && pwd)
libs=${SPIKEHUNT_KAFKA_LIBS:-}
if [ -z "$libs" ]; then
	"$root/deps/install.sh" kafka >&2
	libs=$("$root/deps/install.sh" env | sed -n 's/^SPIKEHUNT_KAFKA_LIBS=//p')
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
cat >"$dir/server.properties" <<PROPS
# written by deploy/kafka.sh on each start
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$controller
listeners=PLAINTEXT://$addr,CONTROLLER://$controller
advertised.listeners=PLAINTEXT://$addr
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
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
	java $jvm -cp "$libs/*" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" --standalone
fi
exec java $jvm -cp "$libs/*" kafka.Kafka "$dir/server.properties"
