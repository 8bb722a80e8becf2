#!/usr/bin/env bash
# librdkafka's own broker test suite (tests/test-runner) against kmirror, and against
# Apache Kafka 4.1.1 as the control: a test failing on Kafka too is not a kmirror finding.
#
# Not CI: it builds librdkafka (minutes on a small machine) and runs one test at a time
# against each broker (minutes to an hour for the whole suite).
#
# Usage:
#   scripts/librdkafka-suite.sh                  # every non-local test
#   TESTS=0001,0002,0030 scripts/librdkafka-suite.sh   # a named subset
#
# Environment:
#   KMIRROR_BIN        kmirror binary (default: target/ci/kmirror)
#   KMIRROR_CACHE      cache dir for the source, build and logs (default: target/librdkafka-suite)
#   KAFKA_CLASSPATH    Apache Kafka 4.1.1 classpath file (default: target/kafka-classpath.txt)
#   RDK_JS_VERSION     @confluentinc/kafka-javascript version whose tarball carries the
#                      librdkafka source (default 1.10.1 = librdkafka 2.15.1)
#   TESTS              comma-separated test numbers to run (default: all non-local ones)
#   PER_TEST_TIMEOUT   seconds before a test is killed and counted as failed (default 240)
#   RUNNER_FLAGS       test-runner flags (default "-L -E -Q")
#   BROKERS            "kmirror kafka" (default), one of them, or "none" (only rewrite the
#                      findings from the results already in the cache). Two runs, one per
#                      broker, may go in parallel; then a BROKERS=none run writes the findings.
#   FINDINGS           findings file to write (default docs/librdkafka-suite-findings.md)
#
# Where the source comes from: GitHub is not reachable from the build machines, but the
# npm registry is, and the @confluentinc/kafka-javascript package bundles the complete
# librdkafka source release (configure, src/, tests/) under deps/librdkafka.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${KMIRROR_CACHE:-$ROOT/target/librdkafka-suite}
KMIRROR_BIN=${KMIRROR_BIN:-$ROOT/target/ci/kmirror}
KAFKA_CLASSPATH=${KAFKA_CLASSPATH:-$ROOT/target/kafka-classpath.txt}
RDK_JS_VERSION=${RDK_JS_VERSION:-1.10.1}
PER_TEST_TIMEOUT=${PER_TEST_TIMEOUT:-240}
# -L: no local-only tests; -E: no sockem (socket fault injection) tests; -Q: quick mode
# (fewer messages, shorter waits). Known-issue tests stay excluded (the runner's default).
RUNNER_FLAGS=${RUNNER_FLAGS:--L -E -Q}
BROKERS=${BROKERS:-kmirror kafka}
FINDINGS=${FINDINGS:-$ROOT/docs/librdkafka-suite-findings.md}
ALLOW=$ROOT/scripts/librdkafka-suite.allow
# The broker version the tests gate their features on (TEST_BRKVER in tests/test.c).
export TEST_KAFKA_VERSION=${TEST_KAFKA_VERSION:-4.1.1}

mkdir -p "$CACHE"
SRC=$CACHE/kafka-javascript-$RDK_JS_VERSION/package/deps/librdkafka
T=$SRC/tests

log() { echo "[librdkafka-suite $(date -u +%H:%M:%S)] $*" >&2; }

# --- 1. fetch the source ----------------------------------------------------------------
fetch_source() {
    if [[ -f $T/test.c ]]; then return; fi
    local dir=$CACHE/kafka-javascript-$RDK_JS_VERSION
    mkdir -p "$dir"
    log "npm pack @confluentinc/kafka-javascript@$RDK_JS_VERSION"
    (cd "$dir" && npm pack --silent "@confluentinc/kafka-javascript@$RDK_JS_VERSION" >/dev/null)
    tar -xzf "$dir"/confluentinc-kafka-javascript-"$RDK_JS_VERSION".tgz -C "$dir"
    # The tarball must carry a buildable librdkafka with its test suite.
    for f in configure src/rdkafka.c tests/test.c tests/Makefile; do
        [[ -e $SRC/$f ]] || { log "tarball lacks deps/librdkafka/$f"; exit 1; }
    done
}

# --- 2. build librdkafka and tests/test-runner ------------------------------------------
build() {
    if [[ -x $T/test-runner ]]; then return; fi
    log "building librdkafka $(grep -m1 -o 'v[0-9.]*' "$SRC/CHANGELOG.md") (a few minutes)"
    # No --install-deps (it downloads): what the machine has (OpenSSL, zlib) is enough;
    # GSSAPI is off since the tests here never use Kerberos.
    (cd "$SRC" && { [[ -f Makefile.config ]] || ./configure --disable-gssapi >"$CACHE/configure.log" 2>&1; })
    make -C "$SRC" -j"$(nproc)" libs >"$CACHE/make.log" 2>&1
    make -C "$T" -j"$(nproc)" test-runner >>"$CACHE/make.log" 2>&1
}

# --- the test list ----------------------------------------------------------------------
# Every _TEST(NNNN_name, flags, ...) entry of tests/test.c; entries flagged TEST_F_LOCAL
# (mock cluster, unit tests, config parsing) never talk to a broker and are left out.
# Prints "NNNN name" per broker test, one line each, in suite order.
broker_tests() {
    python3 - "$T/test.c" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
body = text[text.index("struct test tests[]"):]
body = body[:body.index("{NULL}")]
seen = set()
for m in re.finditer(r"_TEST\((\d{4})_(\w+)\s*,([^)]*)", body):
    num, name, flags = m.group(1), m.group(2), m.group(3)
    if "TEST_F_LOCAL" in flags.split(",")[0] or num in seen:
        continue
    seen.add(num)
    print(num, f"{num}_{name}")
EOF
}

# --- brokers ----------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() { # port seconds pid
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

BROKER_PID=""
BROKER_DIR=""
stop_broker() {
    if [[ -n $BROKER_PID ]]; then
        kill "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
        BROKER_PID=""
    fi
    if [[ -n $BROKER_DIR ]]; then rm -rf "$BROKER_DIR"; BROKER_DIR=""; fi
}
trap stop_broker EXIT

# Both brokers get the same defaults the librdkafka suite expects from a stock broker:
# topic auto-creation on, 4 partitions for auto-created topics.
start_kmirror() {
    BROKER_DIR=$(mktemp -d /tmp/rdk-kmirror.XXXXXX)
    PORT=$(free_port)
    "$KMIRROR_BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$BROKER_DIR/data" \
        --auto-create-topics true --num-partitions 4 >"$LOGDIR/broker.log" 2>&1 &
    BROKER_PID=$!
    wait_port "$PORT" 30 "$BROKER_PID" || { log "kmirror did not start"; tail -20 "$LOGDIR/broker.log"; exit 1; }
}

# A single KRaft node (broker+controller), as tests/src/kafka.rs starts one.
start_kafka() {
    BROKER_DIR=$(mktemp -d /tmp/rdk-kafka.XXXXXX)
    PORT=$(free_port)
    local cport cp java
    cport=$(free_port)
    cp=$(cat "$KAFKA_CLASSPATH")
    java=(java -Xmx768m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true
        "-Dlog4j2.configurationFile=$ROOT/tests/java/log4j2-quiet.properties" -cp "$cp")
    cat >"$BROKER_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$BROKER_DIR/data
num.partitions=4
auto.create.topics.enable=true
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
EOF
    local id
    id=$("${java[@]}" kafka.tools.StorageTool random-uuid)
    "${java[@]}" kafka.tools.StorageTool format --ignore-formatted --cluster-id="$id" \
        -c "$BROKER_DIR/server.properties" >"$LOGDIR/format.log" 2>&1
    "${java[@]}" kafka.Kafka "$BROKER_DIR/server.properties" >"$LOGDIR/broker.log" 2>&1 &
    BROKER_PID=$!
    wait_port "$PORT" 120 "$BROKER_PID" || { log "Kafka did not start"; tail -20 "$LOGDIR/broker.log"; exit 1; }
    sleep 3 # the listener opens before the metadata log has caught up
}

# Share groups (KIP-932, the 0170-0190 tests) are off until `share.version` is finalized, on
# Kafka 4.1 as on kmirror; both get it as a user enables it.
enable_share_groups() {
    local cp
    cp=$(cat "$KAFKA_CLASSPATH")
    java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        "-Dlog4j2.configurationFile=$ROOT/tests/java/log4j2-quiet.properties" -cp "$cp" \
        org.apache.kafka.tools.FeatureCommand --bootstrap-server "127.0.0.1:$PORT" \
        upgrade --feature share.version=1 >"$LOGDIR/features.log" 2>&1 ||
        { log "enabling share.version failed"; cat "$LOGDIR/features.log" >&2; exit 1; }
}

# --- 3. run the tests on one broker -----------------------------------------------------
# Writes $CACHE/results-<broker>.tsv: "NNNN<TAB>name<TAB>PASSED|FAILED|SKIPPED|TIMEOUT|ALLOWED<TAB>secs".
run_on() {
    local broker=$1 res num name status rc t0 out
    LOGDIR=$CACHE/logs-$broker
    rm -rf "$LOGDIR"
    mkdir -p "$LOGDIR"
    res=$CACHE/results-$broker.tsv
    : >"$res"
    printf 'flags=%s timeout=%ss tests=%s started=%s' "$RUNNER_FLAGS" "$PER_TEST_TIMEOUT" \
        "${TESTS:-all}" "$(date -u +%FT%TZ)" >"$CACHE/params-$broker"
    "start_$broker"
    enable_share_groups
    log "$broker on 127.0.0.1:$PORT"
    while read -r num name; do
        if [[ -n ${TESTS:-} && ",$TESTS," != *",$num,"* ]]; then continue; fi
        if grep -q "^$num " "$ALLOW"; then
            printf '%s\t%s\tALLOWED\t0\n' "$num" "$name" >>"$res"
            continue
        fi
        # A broker that died in the previous test is restarted (and the death is logged).
        if ! kill -0 "$BROKER_PID" 2>/dev/null; then
            log "$broker died before $num; restarting"
            echo "$broker died before $num" >>"$LOGDIR/deaths.log"
            cp "$LOGDIR/broker.log" "$LOGDIR/broker-died-before-$num.log" || true
            stop_broker
            "start_$broker"
            enable_share_groups
        fi
        # Each test gets a fresh topic prefix so no test sees another's topics.
        printf 'bootstrap.servers=127.0.0.1:%s\ntest.timeout.multiplier=2\ntest.topic.random=true\n' \
            "$PORT" >"$LOGDIR/test.conf"
        out=$LOGDIR/$name.log
        t0=$(date +%s)
        rc=0
        # The runner links the just-built ../src and ../src-cpp libraries (as run-test.sh).
        (cd "$T" && TESTS=$num RDKAFKA_TEST_CONF=$LOGDIR/test.conf \
            LD_LIBRARY_PATH=../src:../src-cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
            timeout -k 10 "$PER_TEST_TIMEOUT" ./test-runner $RUNNER_FLAGS) >"$out" 2>&1 || rc=$?
        # The runner's summary table: "| NNNN_name | PASSED|FAILED|SKIPPED | secs |", in
        # colour; one number can hold several tests (0045_subscribe_update, ..._regex, ...).
        rows=$(sed 's/\x1b\[[0-9;]*m//g' "$out" | grep -E '^\| ' | grep -v '<MAIN>' || true)
        if ((rc == 124 || rc == 137)); then
            status=TIMEOUT
        elif ((rc != 0)) || grep -q '| *FAILED' <<<"$rows"; then
            status=FAILED
        elif grep -q '| *PASSED' <<<"$rows"; then
            status=PASSED
        else
            # Skipped by the test itself (broker version, no SASL/SSL in test.conf, no
            # KAFKA_PATH for trivup cluster control) or by the runner's flags (manual tests).
            status=SKIPPED
        fi
        if [[ $status == FAILED || $status == TIMEOUT ]]; then
            # Kept across runs (a rerun overwrites $LOGDIR): the runner's log and the broker's.
            mkdir -p "$CACHE/kept"
            cp "$out" "$CACHE/kept/$(date -u +%Y%m%dT%H%M%S)-$broker-$name.log"
            cp "$LOGDIR/broker.log" "$CACHE/kept/$(date -u +%Y%m%dT%H%M%S)-$broker-$name-broker.log"
        fi
        printf '%s\t%s\t%s\t%s\n' "$num" "$name" "$status" "$(($(date +%s) - t0))" >>"$res"
        log "$broker $name $status $(($(date +%s) - t0))s"
    done < <(broker_tests)
    stop_broker
    echo " finished=$(date -u +%FT%TZ)" >>"$CACHE/params-$broker"
}

# --- 4. findings ------------------------------------------------------------------------
count() { awk -F'\t' -v s="$2" '$3 == s' "$CACHE/results-$1.tsv" 2>/dev/null | wc -l; }

# The lines of a runner log that say why a test failed.
failure_lines() {
    sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E 'FAIL|Test.*failed|assert|TIMEOUT|timed out|Error|ERR_' \
        | grep -vE '^\| |^TEST .*(PASSED|SKIPPED)|<MAIN>|TEST FAILURE$' | head -6 | cut -c1-300 || true
}

# The first failed sub-test and its assertion, on one line, without the timestamp.
first_failure() {
    sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -A1 '^### Test' | grep -vE '<MAIN>|^--' | head -2 \
        | sed -E 's/ at [A-Z][a-z]{2} [A-Z][a-z]{2} .*###$/ ###/' | tr '\n`' " '" | cut -c1-400
}

write_findings() {
    local b num name status kstatus notes=""
    # Hand-written analysis below the marker line survives regeneration.
    local marker='<!-- hand-written notes below: kept when the script rewrites this file -->'
    if [[ -f $FINDINGS ]] && grep -qF "$marker" "$FINDINGS"; then
        notes=$(sed -n "/^$marker\$/,\$p" "$FINDINGS" | tail -n +2)
    fi
    {
        echo "# librdkafka test suite against kmirror"
        echo
        echo "Generated by \`scripts/librdkafka-suite.sh\` on $(date -u +%Y-%m-%d) with librdkafka"
        echo "$(grep -m1 -o 'v[0-9.]*' "$SRC/CHANGELOG.md") (from @confluentinc/kafka-javascript@$RDK_JS_VERSION),"
        echo "run parameters:"
        for b in kmirror kafka; do
            [[ -f $CACHE/params-$b ]] && echo "- $b: $(cat "$CACHE/params-$b")"
        done
        echo
        echo "Each test runs alone (\`TESTS=NNNN ./test-runner <flags>\`) against one kmirror node and"
        echo "against one Apache Kafka 4.1.1 KRaft node with the same defaults (auto-create on,"
        echo "4 partitions). Tests in \`scripts/librdkafka-suite.allow\` are not run (ALLOWED)."
        echo
        echo "| broker | passed | failed | timed out | skipped by the suite | allow-listed |"
        echo "|---|---|---|---|---|---|"
        for b in kmirror kafka; do
            [[ -f $CACHE/results-$b.tsv ]] || continue
            echo "| $b | $(count "$b" PASSED) | $(count "$b" FAILED) | $(count "$b" TIMEOUT) | $(count "$b" SKIPPED) | $(count "$b" ALLOWED) |"
        done
        echo
        echo "## Fails on kmirror, passes on Kafka"
        echo
        local any=0
        if [[ -f $CACHE/results-kmirror.tsv ]]; then
            while IFS=$'\t' read -r num name status _; do
                [[ $status == FAILED || $status == TIMEOUT ]] || continue
                kstatus=$(awk -F'\t' -v n="$num" '$1 == n {print $3}' "$CACHE/results-kafka.tsv" 2>/dev/null)
                if [[ $kstatus == PASSED ]]; then
                    any=1
                    echo "### $name ($status)"
                    echo
                    echo '```'
                    failure_lines "$CACHE/logs-kmirror/$name.log"
                    echo '```'
                    echo
                fi
            done <"$CACHE/results-kmirror.tsv"
        fi
        ((any)) || echo "None."
        echo
        echo "## Fails on both (not kmirror findings)"
        echo
        any=0
        if [[ -f $CACHE/results-kmirror.tsv && -f $CACHE/results-kafka.tsv ]]; then
            while IFS=$'\t' read -r num name status _; do
                [[ $status == FAILED || $status == TIMEOUT ]] || continue
                kstatus=$(awk -F'\t' -v n="$num" '$1 == n {print $3}' "$CACHE/results-kafka.tsv")
                if [[ $kstatus == FAILED || $kstatus == TIMEOUT ]]; then
                    any=1
                    # Both first failures: when kmirror fails at an earlier sub-test than
                    # Kafka, the difference is still a finding.
                    echo "- $name: kmirror $status, Kafka $kstatus"
                    echo "  - kmirror: \`$(first_failure "$CACHE/logs-kmirror/$name.log")\`"
                    echo "  - Kafka: \`$(first_failure "$CACHE/logs-kafka/$name.log")\`"
                fi
            done <"$CACHE/results-kmirror.tsv"
        fi
        ((any)) || echo "None."
        echo
        echo "## Per test"
        echo
        echo "| test | kmirror | Kafka 4.1.1 |"
        echo "|---|---|---|"
        join -t $'\t' -a1 -a2 -e - -o 0,1.2,1.3,2.2,2.3 \
            <(awk -F'\t' '{print $2"\t"$3"\t"$4}' "$CACHE/results-kmirror.tsv" 2>/dev/null | sort) \
            <(awk -F'\t' '{print $2"\t"$3"\t"$4}' "$CACHE/results-kafka.tsv" 2>/dev/null | sort) \
            | awk -F'\t' '{printf "| %s | %s (%ss) | %s (%ss) |\n", $1, $2, $3, $4, $5}'
        echo
        echo "$marker"
        [[ -z $notes ]] || echo "$notes"
    } >"$FINDINGS"
    log "wrote $FINDINGS"
}

fetch_source
build
for b in $BROKERS; do
    [[ $b == none ]] || run_on "$b"
done
write_findings
