//! Shared plumbing of the end-to-end benchmark binaries: an Apache Kafka 4.1.1 node (or a
//! second, broker-only node of its cluster) started with the JVM flags of Kafka's own start
//! scripts (G1, full JIT: the test harness's quick-start flags would handicap Kafka), Java
//! tools with full JIT, MirrorMaker 2 (its properties and process), the `kmirror mirror` CLI,
//! the wait-until-caught-up loop, and /proc process accounting.

#![allow(dead_code)] // each binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kmirror_tests::deps;
use kmirror_tests::java::tools;
use kmirror_tests::proc::{self, ChildGuard};
use kmirror_tests::WireClient;

/// `java` with Kafka's production-like flags (kafka-run-class.sh: G1, MaxGCPauseMillis=20),
/// `-Xms` = `-Xmx` = `heap` as kafka-server-start.sh does.
pub(crate) fn java(heap: &str, main_class: &str) -> Command {
    java_heap(heap, heap, main_class)
}

/// [`java`] with a distinct initial heap (connect-mirror-maker.sh: -Xms256M -Xmx2G).
pub(crate) fn java_heap(xms: &str, xmx: &str, main_class: &str) -> Command {
    java_logging(xms, xmx, &deps::log4j_config(), main_class)
}

/// [`java_heap`] with the log4j2 configuration file `log_config`.
pub(crate) fn java_logging(xms: &str, xmx: &str, log_config: &Path, main_class: &str) -> Command {
    let mut c = Command::new(deps::java());
    c.arg(format!("-Xmx{xmx}"))
        .arg(format!("-Xms{xms}"))
        .args([
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            "-Djava.awt.headless=true",
        ])
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            log_config.display()
        ))
        .arg("-cp")
        .arg(deps::kafka_classpath())
        .arg(main_class);
    c
}

/// Runs a Kafka tool (512 MiB heap, full JIT) to completion; panics unless it exits 0.
pub(crate) fn run_tool(main_class: &str, args: &[&str], timeout: Duration) -> proc::Ran {
    proc::run_ok(java("512m", main_class).args(args), timeout)
}

/// ProducerPerformance writing `records` records of 1 KiB to `topic` as fast as it can, with
/// `props` (`key=value`) after `bootstrap.servers`.
pub(crate) fn producer_performance(
    boot: &str,
    topic: &str,
    records: u64,
    props: &[&str],
    timeout: Duration,
) -> proc::Ran {
    let args = kmirror_tests::java::producer_performance_args(boot, topic, records, 1024, props);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_tool(
        kmirror_tests::java::tools::PRODUCER_PERFORMANCE,
        &args,
        timeout,
    )
}

/// One KRaft Apache Kafka 4.1.1 node on loopback: a single-node broker+controller
/// ([`Kafka::start`]) or a broker-only node joining one ([`Kafka::start_broker`]).
pub(crate) struct Kafka {
    dir: tempfile::TempDir,
    port: u16,
    /// The controller listener's port (broker+controller nodes only).
    cport: Option<u16>,
    ssl_port: Option<u16>,
    child: Option<ChildGuard>,
}

/// The KRaft cluster id every bench node is formatted with (22 chars of URL-safe base64).
const CLUSTER_ID: &str = "kmirrorBenchClusterIdA";

impl Kafka {
    /// Formats and starts a node with a `heap` JVM heap; returns once Metadata answers.
    pub(crate) fn start(heap: &str, extra: &[(&str, &str)]) -> Self {
        Self::start_ssl(heap, extra, None)
    }

    /// [`Kafka::start`] plus, with `ssl` = (PEM keystore: key + chain, CA PEM), an SSL client
    /// listener next to PLAINTEXT ([`Kafka::ssl_bootstrap`]).
    pub(crate) fn start_ssl(
        heap: &str,
        extra: &[(&str, &str)],
        ssl: Option<(&Path, &Path)>,
    ) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("kmirror-bench-kafka-")
            .tempdir()
            .expect("temp dir");
        let port = proc::free_port();
        let cport = proc::free_port();
        let sport = ssl.map(|_| proc::free_port());
        let mut props = node_props(
            "broker,controller",
            1,
            cport,
            &format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"),
            port,
            dir.path(),
        );
        props.extend(
            [
                ("num.partitions", "1".to_string()),
                ("default.replication.factor", "1".into()),
                ("offsets.topic.replication.factor", "1".into()),
                ("offsets.topic.num.partitions", "8".into()),
                ("transaction.state.log.replication.factor", "1".into()),
                ("transaction.state.log.min.isr", "1".into()),
                (
                    "share.coordinator.state.topic.replication.factor",
                    "1".into(),
                ),
                ("share.coordinator.state.topic.min.isr", "1".into()),
                ("group.initial.rebalance.delay.ms", "0".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
        );
        let mut extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let (Some((keystore, ca)), Some(sport)) = (ssl, sport) {
            let ssl_props = [
                (
                    "listeners",
                    format!(
                        "PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},SSL://127.0.0.1:{sport}"
                    ),
                ),
                (
                    "advertised.listeners",
                    format!("PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{sport}"),
                ),
                (
                    "listener.security.protocol.map",
                    "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL".into(),
                ),
                ("ssl.keystore.type", "PEM".into()),
                ("ssl.keystore.location", keystore.display().to_string()),
                ("ssl.truststore.type", "PEM".into()),
                ("ssl.truststore.location", ca.display().to_string()),
            ];
            extra.splice(0..0, ssl_props.map(|(k, v)| (k.to_string(), v)));
        }
        for (k, v) in &extra {
            props.retain(|(pk, _)| pk != k);
            props.push((k.clone(), v.clone()));
        }
        Self::launch(dir, port, Some(cport), sport, heap, &props)
    }

    /// Starts `n` broker+controller nodes (KRaft combined mode, a quorum of `n` voters) with
    /// replication factor min(n, 3) for every topic and `extra` server properties; returns
    /// once every node lists all `n` brokers.
    pub(crate) fn start_cluster(n: usize, heap: &str, extra: &[(&str, &str)]) -> Vec<Self> {
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| (proc::free_port(), proc::free_port()))
            .collect();
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@127.0.0.1:{c}", i + 1))
            .collect();
        let voters = voters.join(",");
        let rf = n.min(3).to_string();
        // Each node waits for Metadata in launch, which needs a quorum: start them together.
        let nodes: Vec<Self> = std::thread::scope(|s| {
            let handles: Vec<_> = ports
                .iter()
                .enumerate()
                .map(|(i, (port, cport))| {
                    let (voters, rf) = (&voters, &rf);
                    s.spawn(move || {
                        let dir = tempfile::Builder::new()
                            .prefix("kmirror-bench-kafka-")
                            .tempdir()
                            .expect("temp dir");
                        let mut props = node_props_voters(
                            "broker,controller",
                            i as i32 + 1,
                            voters,
                            &format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"),
                            *port,
                            dir.path(),
                        );
                        props.extend(
                            [
                                ("num.partitions", "1".to_string()),
                                ("default.replication.factor", rf.clone()),
                                ("offsets.topic.replication.factor", rf.clone()),
                                ("offsets.topic.num.partitions", "8".into()),
                                ("transaction.state.log.replication.factor", rf.clone()),
                                (
                                    "share.coordinator.state.topic.replication.factor",
                                    rf.clone(),
                                ),
                                ("group.initial.rebalance.delay.ms", "0".into()),
                            ]
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v)),
                        );
                        for (k, v) in extra {
                            props.retain(|(pk, _)| pk != k);
                            props.push((k.to_string(), v.to_string()));
                        }
                        Self::launch(dir, *port, Some(*cport), None, heap, &props)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("Kafka node start"))
                .collect()
        });
        for k in &nodes {
            let addr = k.bootstrap();
            proc::wait_for(Duration::from_secs(120), "every broker registered", || {
                let md = WireClient::connect(&addr).ok()?.metadata(None).ok()?;
                (md.brokers.len() == n).then_some(())
            });
        }
        nodes
    }

    /// Starts a broker-only node with `node.id` = `node_id` that joins `first`'s cluster (its
    /// controller), with `extra` server properties; returns once `first` lists it as a broker.
    pub(crate) fn start_broker(
        first: &Kafka,
        node_id: i32,
        heap: &str,
        extra: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("kmirror-bench-kafka-")
            .tempdir()
            .expect("temp dir");
        let port = proc::free_port();
        let cport = first.cport.expect("the first node is a controller");
        let mut props = node_props(
            "broker",
            node_id,
            cport,
            &format!("PLAINTEXT://127.0.0.1:{port}"),
            port,
            dir.path(),
        );
        for (k, v) in extra {
            props.retain(|(pk, _)| pk != k);
            props.push((k.to_string(), v.to_string()));
        }
        let node = Self::launch(dir, port, None, None, heap, &props);
        let boot = first.bootstrap();
        proc::wait_for(
            Duration::from_secs(120),
            "the second broker to register",
            || {
                let md = WireClient::connect(&boot).ok()?.metadata(None).ok()?;
                md.brokers
                    .iter()
                    .any(|b| b.node_id.0 == node_id)
                    .then_some(())
            },
        );
        node
    }

    /// Writes `props`, formats the storage, spawns the JVM; returns once Metadata answers.
    fn launch(
        dir: tempfile::TempDir,
        port: u16,
        cport: Option<u16>,
        ssl_port: Option<u16>,
        heap: &str,
        props: &[(String, String)],
    ) -> Self {
        let config = dir.path().join("server.properties");
        let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&config, text).expect("write server.properties");
        proc::run_ok(
            java("256m", "kafka.tools.StorageTool")
                .args(["format", "--ignore-formatted", "-t", CLUSTER_ID, "-c"])
                .arg(&config),
            Duration::from_secs(120),
        );
        let log = std::fs::File::create(dir.path().join("kafka.log")).expect("kafka log");
        let child = java(heap, "kafka.Kafka")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("spawn kafka.Kafka");
        let mut k = Kafka {
            dir,
            port,
            cport,
            ssl_port,
            child: Some(ChildGuard(child)),
        };
        let addr = k.bootstrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(s)) = k.child.as_mut().expect("running").0.try_wait() {
                panic!("Kafka exited ({s}):\n{}", proc::tail(&k.log(), 40));
            }
            let ok = WireClient::connect(&addr)
                .and_then(|mut c| c.metadata(None))
                .map(|md| !md.brokers.is_empty())
                .unwrap_or(false);
            if ok {
                return k;
            }
            assert!(
                Instant::now() < deadline,
                "Kafka not ready:\n{}",
                proc::tail(&k.log(), 40)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `127.0.0.1:PORT`.
    pub(crate) fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT` of the SSL listener ([`Kafka::start_ssl`]).
    pub(crate) fn ssl_bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.ssl_port.expect("started with SSL"))
    }

    /// The node's `log.dirs`.
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The broker's stdout/stderr log.
    pub(crate) fn log(&self) -> PathBuf {
        self.dir.path().join("kafka.log")
    }

    /// The JVM's PID.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").0.id()
    }

    /// SIGTERM and wait.
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            proc::terminate(&mut c.0, Duration::from_secs(60));
        }
    }

    /// [`Kafka::stop`] on every node of a cluster at once: one at a time, the last
    /// controller has lost its quorum and waits out the 60 s before its SIGKILL.
    pub(crate) fn stop_all(nodes: &mut [Self]) {
        std::thread::scope(|s| {
            for k in nodes.iter_mut() {
                s.spawn(move || k.stop());
            }
        });
    }
}

/// Creates `topic` with `partitions` partitions (replication 1) over the wire and waits for
/// leaders; works on Kafka and kmirror alike.
pub(crate) fn create_topic(addr: &str, topic: &str, partitions: i32, configs: &[(&str, &str)]) {
    create_topic_rf(addr, topic, partitions, 1, configs)
}

/// [`create_topic`] with replication factor `rf`.
pub(crate) fn create_topic_rf(
    addr: &str,
    topic: &str,
    partitions: i32,
    rf: i16,
    configs: &[(&str, &str)],
) {
    // A bootstrap list: any node will do.
    let addr = addr.split(',').next().unwrap_or(addr);
    let mut c = WireClient::connect(addr).expect("connect");
    let code = c
        .create_topic(topic, partitions, rf, configs)
        .expect("CreateTopics");
    assert_eq!(code, 0, "CreateTopics {topic} on {addr}: error {code}");
    proc::wait_for(Duration::from_secs(30), "topic leaders", || {
        (0..partitions)
            .all(|p| c.partition_info(topic, p).is_ok())
            .then_some(())
    });
}

/// Sum of the end offsets of `topic`'s partitions (None while the topic is not there yet).
pub(crate) fn total_end_offset(addr: &str, topic: &str, partitions: i32) -> Option<i64> {
    let mut c = WireClient::connect(addr).ok()?;
    let mut sum = 0;
    for p in 0..partitions {
        sum += c.log_bounds(topic, p).ok()?.1;
    }
    Some(sum)
}

/// Clock ticks per second for /proc/PID/stat times (`getconf CLK_TCK`, no `unsafe`).
fn clk_tck() -> f64 {
    let out = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(100.0)
}

/// User + system CPU seconds `pid` has used so far (its threads included).
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    // Fields after the ")" that closes comm: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / clk_tck()
}

/// Peak resident set (VmHWM) of `pid` in MiB.
pub(crate) fn peak_rss_mib(pid: u32) -> f64 {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib / 1024.0
}

/// The 1-minute load average, printed next to results: this machine is shared.
pub(crate) fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The kmirror binary: `KMIRROR_BIN` or a fresh release build (the harness's rule).
pub(crate) fn kmirror_bin() -> &'static Path {
    deps::kmirror_bin()
}

/// `mm2.properties` for a dedicated-mode MirrorMaker 2 copying `topics` (a list or regex) from
/// cluster alias `source` to alias `target`: MM2's defaults except what single-node clusters
/// need (replication factors 1) and the side flows a pure data copy does not use (heartbeats,
/// checkpoints, group offset sync, ACL sync), then `extra` lines in order (e.g. client tuning:
/// `source.consumer.*`, `target.producer.*`).
pub(crate) fn mm2_properties(
    source: &str,
    target: &str,
    topics: &str,
    tasks: u32,
    extra: &[(&str, &str)],
) -> String {
    let mut props = format!(
        "clusters = source, target\n\
         source.bootstrap.servers = {source}\n\
         target.bootstrap.servers = {target}\n\
         source->target.enabled = true\n\
         source->target.topics = {topics}\n\
         target->source.enabled = false\n\
         tasks.max = {tasks}\n\
         replication.factor = 1\n\
         checkpoints.topic.replication.factor = 1\n\
         heartbeats.topic.replication.factor = 1\n\
         offset-syncs.topic.replication.factor = 1\n\
         offset.storage.replication.factor = 1\n\
         status.storage.replication.factor = 1\n\
         config.storage.replication.factor = 1\n\
         emit.heartbeats.enabled = false\n\
         emit.checkpoints.enabled = false\n\
         sync.group.offsets.enabled = false\n\
         sync.topic.acls.enabled = false\n"
    );
    for (k, v) in extra {
        props.push_str(&format!("{k} = {v}\n"));
    }
    props
}

/// A running dedicated-mode MirrorMaker 2 (connect-mirror 4.1.1), killed on drop.
pub(crate) struct Mm2 {
    dir: tempfile::TempDir,
    child: ChildGuard,
}

impl Mm2 {
    /// Writes `props` to `mm2.properties` and spawns MirrorMaker with connect-mirror-maker.sh's
    /// heap (-Xms256M -Xmx2G). Its log has warnings plus the effective client configurations
    /// ("ConsumerConfig values:" etc., logged once per client at start), so a run can
    /// show that the tuning reached the clients.
    pub(crate) fn spawn(props: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("mm2.properties");
        std::fs::write(&path, props).expect("write mm2.properties");
        let quiet = std::fs::read_to_string(deps::log4j_config()).expect("log4j2 config");
        let log_config = dir.path().join("log4j2.properties");
        std::fs::write(
            &log_config,
            format!(
                "{quiet}\nlogger.config.name = org.apache.kafka.common.config.AbstractConfig\n\
                 logger.config.level = info\n"
            ),
        )
        .expect("write log4j2.properties");
        let log = std::fs::File::create(dir.path().join("mm2.log")).expect("mm2 log");
        let child = java_logging("256m", "2g", &log_config, tools::MIRROR_MAKER)
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("spawn MirrorMaker");
        Mm2 {
            dir,
            child: ChildGuard(child),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.0.id()
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.0.try_wait(), Ok(None))
    }

    /// MirrorMaker's stdout/stderr log.
    pub(crate) fn log(&self) -> PathBuf {
        self.dir.path().join("mm2.log")
    }

    /// SIGTERM and wait (up to 30 s).
    pub(crate) fn stop(&mut self) {
        proc::terminate(&mut self.child.0, Duration::from_secs(30));
    }
}

/// `kmirror mirror --bootstrap ADDR ARGS…`; Err(one-line error) unless it exits 0.
pub(crate) fn kmirror_cli(addr: &str, args: &[&str]) -> Result<String, String> {
    kmirror_cli_of(kmirror_bin(), addr, args)
}

/// [`kmirror_cli`] with the CLI of binary `bin` (the one whose node it talks to).
pub(crate) fn kmirror_cli_of(bin: &Path, addr: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(bin)
        .args(["mirror", "--bootstrap", addr])
        .args(args)
        .output()
        .expect("run kmirror mirror");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kmirror mirror {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `kmirror mirror create NAME --source SOURCE`, then `kmirror mirror add NAME ADD_ARGS…`
/// (e.g. `["--topics", "t"]` or `["--topic-regex", "t-.*"]`) on the node at `addr`.
pub(crate) fn kmirror_mirror(
    addr: &str,
    name: &str,
    source: &str,
    add_args: &[&str],
) -> Result<(), String> {
    kmirror_mirror_of(kmirror_bin(), addr, name, source, add_args)
}

/// [`kmirror_mirror`] with the CLI of binary `bin`.
pub(crate) fn kmirror_mirror_of(
    bin: &Path,
    addr: &str,
    name: &str,
    source: &str,
    add_args: &[&str],
) -> Result<(), String> {
    kmirror_cli_of(bin, addr, &["create", name, "--source", source])?;
    let mut add = vec!["add", name];
    add.extend_from_slice(add_args);
    kmirror_cli_of(bin, addr, &add)?;
    Ok(())
}

/// Polls `end()` every `poll` until it reaches `want`; returns (seconds since `t0`, seconds
/// since `end()` first turned positive). Progress goes to stderr every 10 s. Panics after
/// `timeout` or once `alive()` turns false.
pub(crate) fn wait_caught_up(
    t0: Instant,
    want: i64,
    timeout: Duration,
    poll: Duration,
    mut end: impl FnMut() -> Option<i64>,
    mut alive: impl FnMut() -> bool,
) -> (f64, f64) {
    let mut first: Option<Instant> = None;
    let mut last_print = Instant::now();
    loop {
        let now_end = end().unwrap_or(0);
        if now_end > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        if now_end >= want {
            let done = Instant::now();
            return (
                (done - t0).as_secs_f64(),
                (done - first.unwrap_or(t0)).as_secs_f64(),
            );
        }
        assert!(
            alive(),
            "copier exited before catching up ({now_end}/{want})"
        );
        assert!(
            t0.elapsed() < timeout,
            "not caught up after {timeout:?}: {now_end}/{want}"
        );
        if last_print.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {now_end}/{want} after {:.0} s",
                t0.elapsed().as_secs_f64()
            );
            last_print = Instant::now();
        }
        std::thread::sleep(poll);
    }
}

/// Median and (min, max) of `v` (the upper median for an even count); None if empty.
pub(crate) fn median_spread(v: &[f64]) -> Option<(f64, f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some((*s.get(s.len() / 2)?, s[0], s[s.len() - 1]))
}

/// The server properties every benchmark Kafka node shares: KRaft with node 1 as the only
/// controller, plaintext on loopback, no topic auto-creation.
fn node_props(
    roles: &str,
    node_id: i32,
    cport: u16,
    listeners: &str,
    port: u16,
    dir: &Path,
) -> Vec<(String, String)> {
    node_props_voters(
        roles,
        node_id,
        &format!("1@127.0.0.1:{cport}"),
        listeners,
        port,
        dir,
    )
}

fn node_props_voters(
    roles: &str,
    node_id: i32,
    voters: &str,
    listeners: &str,
    port: u16,
    dir: &Path,
) -> Vec<(String, String)> {
    [
        ("process.roles", roles.to_string()),
        ("node.id", node_id.to_string()),
        ("controller.quorum.voters", voters.to_string()),
        ("listeners", listeners.to_string()),
        (
            "advertised.listeners",
            format!("PLAINTEXT://127.0.0.1:{port}"),
        ),
        ("controller.listener.names", "CONTROLLER".into()),
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
        ),
        ("inter.broker.listener.name", "PLAINTEXT".into()),
        ("log.dirs", dir.join("data").display().to_string()),
        ("auto.create.topics.enable", "false".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Bytes of the `.log` segment files of `topic`'s partitions under `dir`, at any depth (the
/// partition directories are `<topic>-<p>` in Kafka and kmirror alike).
pub(crate) fn segment_bytes(dir: &std::path::Path, topic: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let prefix = format!("{topic}-");
    let in_partition = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.strip_prefix(&prefix)
            .is_some_and(|p| p.parse::<u32>().is_ok())
    });
    let mut total = 0;
    for e in entries.flatten() {
        let path = e.path();
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            total += segment_bytes(&path, topic);
        } else if in_partition && path.extension().is_some_and(|x| x == "log") {
            total += meta.len();
        }
    }
    total
}

/// Record batches and their bytes in the `.log` segments of `topic` under `dir` (a Kafka
/// data dir): the average source batch size that sets a mirror's per-batch costs.
#[allow(dead_code)]
pub(crate) fn segment_batches(dir: &std::path::Path, topic: &str) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    let prefix = format!("{topic}-");
    let in_partition = dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.strip_prefix(&prefix)
            .is_some_and(|p| p.parse::<u32>().is_ok())
    });
    let (mut batches, mut bytes) = (0u64, 0u64);
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            let (b, n) = segment_batches(&path, topic);
            batches += b;
            bytes += n;
        } else if in_partition && path.extension().is_some_and(|x| x == "log") {
            let Ok(data) = std::fs::read(&path) else {
                continue;
            };
            let mut pos = 0usize;
            // Each batch: base offset (8), length (4), then `length` bytes.
            while let Some(len) = data.get(pos + 8..pos + 12) {
                let len = i32::from_be_bytes(len.try_into().expect("4")) as usize;
                if len == 0 || pos + 12 + len > data.len() {
                    break;
                }
                batches += 1;
                bytes += 12 + len as u64;
                pos += 12 + len;
            }
        }
    }
    (batches, bytes)
}
