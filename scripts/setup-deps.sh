#!/usr/bin/env bash
# Installs the real parts the integration tests use, on a fresh machine. Idempotent:
#  - Apache Kafka 4.1.1 jars (broker, tools, MirrorMaker 2) from Maven Central via mvn,
#    cached under ~/.m2 and resolved into one classpath file: target/kafka-classpath.txt
#    (tests/java/pom.xml lists them; the log config is tests/java/log4j2-quiet.properties);
#  - librdkafka through PyPI confluent-kafka (its wheels bundle librdkafka);
#  - franz-go's modules (tests/go/go.mod) into the Go module cache, for tests/src/golang.rs;
#  - Debian's kcat (librdkafka 2.0) and Apache Kafka's Java client 2.1.1
#    (tests/java/old-client/pom.xml -> target/kafka-old-client-classpath.txt), the old
#    clients of tests/tests/old_clients.rs.
# The tests fail loudly (they never skip) when something here is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup-deps: installing $2 with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
  fi
  command -v "$1" >/dev/null 2>&1 || { echo "setup-deps: '$1' not found; install $2" >&2; exit 1; }
}

need cargo cargo
need java openjdk-17-jdk-headless
need javac openjdk-17-jdk-headless
need mvn maven
need python3 python3
need kcat kcat
need go golang-go

java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ "${java_major:-0}" -lt 17 ]; then
  echo "setup-deps: Java >= 17 needed for Kafka 4.x, found ${java_major:-none}" >&2
  exit 1
fi

mkdir -p target
cp_file=target/kafka-classpath.txt
# Re-resolve when the pom changed or a jar vanished from the cache.
stale=1
if [ -s "$cp_file" ] && [ "$cp_file" -nt tests/java/pom.xml ]; then
  stale=0
  IFS=':' read -r -a jars < "$cp_file" || true  # no trailing newline: read returns 1
  for j in "${jars[@]}"; do [ -f "$j" ] || { stale=1; break; }; done
fi
if [ "$stale" = 1 ]; then
  echo "setup-deps: resolving Apache Kafka 4.1.1 jars with mvn" >&2
  if ! mvn_out=$(mvn -q -B -f tests/java/pom.xml dependency:build-classpath \
      -Dmdep.outputFile="$PWD/$cp_file.tmp" 2>&1); then
    echo "$mvn_out" >&2
    echo "setup-deps: mvn could not resolve the Kafka jars" >&2
    exit 1
  fi
  mv "$cp_file.tmp" "$cp_file"
fi
grep -q 'kafka_2.13-4.1.1.jar' "$cp_file" || { echo "setup-deps: kafka_2.13 4.1.1 missing from $cp_file" >&2; exit 1; }
grep -q 'kafka-tools-4.1.1.jar' "$cp_file" || { echo "setup-deps: kafka-tools 4.1.1 missing from $cp_file" >&2; exit 1; }
grep -q 'connect-mirror-4.1.1.jar' "$cp_file" || { echo "setup-deps: connect-mirror 4.1.1 missing from $cp_file" >&2; exit 1; }

old_cp=target/kafka-old-client-classpath.txt
old_pom=tests/java/old-client/pom.xml
stale=1
if [ -s "$old_cp" ] && [ "$old_cp" -nt "$old_pom" ]; then
  stale=0
  IFS=':' read -r -a jars < "$old_cp" || true
  for j in "${jars[@]}"; do [ -f "$j" ] || { stale=1; break; }; done
fi
if [ "$stale" = 1 ]; then
  echo "setup-deps: resolving the Kafka 2.1.1 Java client with mvn" >&2
  if ! mvn_out=$(mvn -q -B -f "$old_pom" dependency:build-classpath \
      -Dmdep.outputFile="$PWD/$old_cp.tmp" 2>&1); then
    echo "$mvn_out" >&2
    echo "setup-deps: mvn could not resolve kafka-clients 2.1.1" >&2
    exit 1
  fi
  mv "$old_cp.tmp" "$old_cp"
fi
grep -q 'kafka-clients-2.1.1.jar' "$old_cp" || { echo "setup-deps: kafka-clients 2.1.1 missing from $old_cp" >&2; exit 1; }

# Python librdkafka client (confluent-kafka wheels bundle librdkafka).
if ! python3 -c 'import confluent_kafka' 2>/dev/null; then
  echo "setup-deps: installing confluent-kafka from PyPI" >&2
  python3 -m pip install --quiet 'confluent-kafka>=2.6' ||
    python3 -m pip install --quiet --break-system-packages 'confluent-kafka>=2.6'
fi
python3 -c 'import confluent_kafka; print("setup-deps: librdkafka", confluent_kafka.libversion()[0])' >&2
# franz-go (tests/go): the tests build the program offline from the module cache.
echo "setup-deps: downloading the Go modules of tests/go" >&2
(cd tests/go && go mod download) || { echo "setup-deps: go mod download failed in tests/go" >&2; exit 1; }
echo "setup-deps: ok (classpath in $cp_file)" >&2
