//! Integration-test harness for kmirror: starts real processes on loopback and judges them.
//!
//! It owns: an Apache Kafka 4.1.1 cluster runner ([`KafkaCluster`], KRaft, 1 or 3 nodes, from
//! the Maven Central jars that `scripts/setup-deps.sh` resolves), a kmirror node runner
//! ([`KmirrorNode`]), runners for the Java tools and our small Java/Python client programs
//! ([`java`], [`python`]), a tiny blocking Kafka wire client ([`wire::WireClient`]), the
//! SPEC's log-equal oracle ([`oracle::log_equal`]) and the small functions several test files
//! share ([`helpers`]).
//!
//! It must not depend on kmirror's own crates' internals (engine, net, control): the tests judge
//! kmirror only from outside, over the wire, as a user's client would.
//!
//! Invariants: every process it starts is killed when its handle drops (no orphan brokers);
//! a missing dependency (Java, the Kafka classpath, confluent-kafka, the kmirror binary) makes
//! the test panic with the command that fixes it, never skip.

pub mod badinput;
pub mod clients;
pub mod cluster;
pub mod conformance;
pub mod deps;
pub mod faultproxy;
pub mod faults;
pub mod golang;
pub mod helpers;
pub mod java;
pub mod kafka;
pub mod kmirror;
pub mod metrics;
pub mod mirror;
pub mod netns;
pub mod oracle;
pub mod pki;
pub mod proc;
pub mod python;
pub mod records;
pub mod sasl;
pub mod share;
pub mod wire;

pub use faultproxy::FaultProxy;
pub use kafka::KafkaCluster;
pub use kmirror::{KmirrorNode, NodeBuilder};
pub use oracle::log_equal;
pub use wire::WireClient;

/// A broker the client tests can run against: kmirror, or Apache Kafka to validate the tests.
pub trait BrokerUnderTest {
    /// `host:port[,host:port…]` for clients.
    fn bootstrap(&self) -> String;
    /// Graceful stop (SIGTERM) and start again on the same address and data.
    fn restart(&mut self);
    /// SIGKILL, no chance to flush.
    fn kill(&mut self);
    /// Start again after [`BrokerUnderTest::kill`], on the same address and data.
    fn start_again(&mut self);
    /// Resident set size of the broker process in KiB (single-process brokers).
    fn rss_kib(&self) -> u64;
    /// Whether the broker process is still running.
    fn is_alive(&mut self) -> bool;
}

/// Serializes heavy tests inside one test binary: the CI machine has 2 cores, and two
/// JVM clusters plus a broker under load at once make timings meaningless.
pub fn heavy_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
