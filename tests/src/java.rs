//! Java tools from the Kafka 4.1.1 jars and our small Java client programs in
//! `tests/java/src`, compiled with javac against the same classpath once per change of either.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::deps;
use crate::proc::{self, Ran};

/// Main classes of the Kafka tools the tests use.
pub mod tools {
    /// kafka-producer-perf-test
    pub const PRODUCER_PERFORMANCE: &str = "org.apache.kafka.tools.ProducerPerformance";
    /// kafka-consumer-perf-test
    pub const CONSUMER_PERFORMANCE: &str = "org.apache.kafka.tools.ConsumerPerformance";
    /// kafka-console-consumer
    pub const CONSOLE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";
    /// kafka-console-producer
    pub const CONSOLE_PRODUCER: &str = "org.apache.kafka.tools.ConsoleProducer";
    /// kafka-topics
    pub const TOPIC_COMMAND: &str = "org.apache.kafka.tools.TopicCommand";
    /// kafka-metadata-quorum
    pub const METADATA_QUORUM_COMMAND: &str = "org.apache.kafka.tools.MetadataQuorumCommand";
    /// kafka-acls
    pub const ACL_COMMAND: &str = "org.apache.kafka.tools.AclCommand";
    /// kafka-consumer-groups
    pub const CONSUMER_GROUP_COMMAND: &str =
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
    /// MirrorMaker 2 driver (connect-mirror)
    pub const MIRROR_MAKER: &str = "org.apache.kafka.connect.mirror.MirrorMaker";
}

/// A `java` command for a Kafka tool's main class (256 MiB heap, quiet logging).
pub fn tool(main_class: &str) -> Command {
    crate::kafka::java_cmd("256m", main_class)
}

/// Runs a Kafka tool to completion; panics (with its output) unless it exits 0.
pub fn run_tool(main_class: &str, args: &[&str], timeout: Duration) -> Ran {
    proc::run_ok(tool(main_class).args(args), timeout)
}

/// ProducerPerformance's arguments: `records` records of `size` bytes to `topic` as fast as
/// it can (`--throughput -1`), with `props` (`key=value`) after `bootstrap.servers`.
pub fn producer_performance_args(
    boot: &str,
    topic: &str,
    records: u64,
    size: u32,
    props: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--topic",
        topic,
        "--num-records",
        &records.to_string(),
        "--record-size",
        &size.to_string(),
        "--throughput",
        "-1",
        "--producer-props",
        &format!("bootstrap.servers={boot}"),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(props.iter().map(|p| p.to_string()));
    args
}

/// Directory with our compiled test programs. Compiled once per set of sources and
/// classpath, not once per test process: the classes go to a directory named by their hash,
/// written beside it and renamed into place, so concurrent processes never read a half-built
/// one and the later ones reuse it.
pub fn programs_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let src = deps::workspace_root().join("tests/java/src");
        let mut sources: Vec<PathBuf> = std::fs::read_dir(&src)
            .expect("tests/java/src")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "java"))
            .collect();
        sources.sort();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        deps::kafka_classpath().hash(&mut h);
        for s in &sources {
            s.hash(&mut h);
            std::fs::read(s).expect("java source").hash(&mut h);
        }
        let root = deps::target_dir().join("kmirror-tests-java");
        let out = root.join(format!("{:016x}", h.finish()));
        if out.is_dir() {
            return out;
        }
        let tmp = root.join(format!("tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).expect("javac output dir");
        proc::run_ok(
            Command::new(deps::javac())
                .args(["-nowarn", "-d"])
                .arg(&tmp)
                .arg("-cp")
                .arg(deps::kafka_classpath())
                .args(&sources),
            Duration::from_secs(180),
        );
        // Another process may have renamed its copy first: then use that one.
        if std::fs::rename(&tmp, &out).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            assert!(
                out.is_dir(),
                "cannot place the compiled test programs in {out:?}"
            );
        }
        out
    })
}

/// A `java` command running our program `class` (from tests/java/src).
pub fn program(class: &str) -> Command {
    let mut c = Command::new(deps::java());
    c.arg("-Xmx256m")
        .arg("-XX:+UseSerialGC")
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            deps::log4j_config().display()
        ))
        .arg("-cp")
        .arg(format!(
            "{}:{}",
            programs_dir().display(),
            deps::kafka_classpath()
        ))
        .arg(class);
    c
}
