//! The kmirror binary: `serve` (the broker), `mirror` (admin CLI) and `demo`.

mod config;
mod demo;
mod mirror_cli;
mod scram_cli;
mod serve;
mod switchover;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A request that claims billions of elements must not abort the broker: see
/// [`kmirror_log::ReservingAllocator`].
#[global_allocator]
static ALLOCATOR: kmirror_log::ReservingAllocator = kmirror_log::ReservingAllocator;

#[derive(Parser)]
#[command(
    name = "kmirror",
    version,
    about = "Kafka-compatible broker with native cluster mirroring"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker until SIGTERM/SIGINT.
    Serve(Box<ServeArgs>),
    /// Manage mirrors on a running broker (`kmirror mirror --help` lists the commands).
    #[command(disable_help_flag = true)]
    Mirror {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Self-contained demo on loopback: two nodes, data mirrored live, then a failover.
    Demo,
    /// Offline SCRAM credential bootstrap (like `kafka-storage format --add-scram`).
    #[command(subcommand)]
    Scram(scram_cli::ScramCommand),
}

/// Flags of `kmirror serve`; each overrides the config file key of the same name.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct ServeArgs {
    /// TOML config file (see kmirror.toml for every key).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// HOST:PORT to listen on (also the advertised address): one PLAINTEXT listener.
    #[arg(long)]
    pub listen: Option<String>,
    /// Listeners, comma-separated PROTOCOL://HOST:PORT (PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL); overrides --listen.
    #[arg(long)]
    pub listeners: Option<String>,
    /// PEM certificate chain for the SSL/SASL_SSL listeners.
    #[arg(long)]
    pub tls_cert: Option<String>,
    /// PEM (PKCS#8) private key for --tls-cert.
    #[arg(long)]
    pub tls_key: Option<String>,
    /// PEM CA certificates for client certificates: set = mutual TLS required on SSL listeners
    /// (SASL_SSL clients authenticate with SASL and need no certificate, as in Kafka).
    #[arg(long)]
    pub tls_client_ca: Option<String>,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    #[arg(long)]
    pub node_id: Option<i32>,
    /// Executor threads (0 = all CPUs).
    #[arg(long)]
    pub cores: Option<usize>,
    /// Prometheus endpoint HOST:PORT.
    #[arg(long)]
    pub metrics: Option<String>,
    #[arg(long)]
    pub pin_cores: Option<bool>,
    /// "spread", "hash" or "topic".
    #[arg(long)]
    pub partition_assignment: Option<String>,
    #[arg(long)]
    pub socket_request_max_bytes: Option<usize>,
    #[arg(long)]
    pub auto_create_topics: Option<bool>,
    #[arg(long)]
    pub num_partitions: Option<i32>,
    /// Kafka's group.initial.rebalance.delay.ms: how long a new classic group waits for more
    /// members before its first rebalance.
    #[arg(long)]
    pub group_initial_rebalance_delay_ms: Option<i32>,
    /// Kafka's offsets.topic.num.partitions (how `__consumer_offsets` is described).
    #[arg(long)]
    pub offsets_topic_num_partitions: Option<i32>,
    /// Kafka's transaction.state.log.num.partitions (how `__transaction_state` is described).
    #[arg(long)]
    pub transaction_state_log_num_partitions: Option<i32>,
    /// Kafka's offsets.retention.minutes: committed offsets of an empty group expire.
    #[arg(long)]
    pub offsets_retention_minutes: Option<i64>,
    /// Kafka's offsets.retention.check.interval.ms.
    #[arg(long)]
    pub offsets_retention_check_interval_ms: Option<i64>,
    #[arg(long)]
    pub retention_check_secs: Option<u64>,
    /// Pause between log compaction rounds, ms (Kafka's log.cleaner.backoff.ms).
    #[arg(long)]
    pub log_cleaner_backoff_ms: Option<u64>,
    /// Log cleaner I/O ceiling, bytes/s (0 = unlimited).
    #[arg(long)]
    pub log_cleaner_io_max_bytes_per_second: Option<u64>,
    #[arg(long)]
    pub log_level: Option<String>,
    /// `mirror.version` feature level (0 = mirror APIs off).
    #[arg(long)]
    pub mirror_version: Option<i16>,
    /// Mirror fetch byte-rate ceiling for the broker, bytes/s (0 = unlimited).
    #[arg(long)]
    pub mirror_byte_rate: Option<u64>,
    /// Enforce ACLs (true|false).
    #[arg(long)]
    pub authorizer: Option<bool>,
    /// Principals that bypass ACLs, semicolon-separated ('User:admin;User:ops').
    #[arg(long)]
    pub super_users: Option<String>,
    /// Allow requests on resources no ACL mentions (true|false).
    #[arg(long)]
    pub allow_everyone_if_no_acl_found: Option<bool>,
    /// SASL mechanisms for SASL_* listeners (SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER).
    #[arg(long)]
    pub sasl_mechanisms: Option<String>,
    /// JWKS file with the keys that sign OAUTHBEARER tokens.
    #[arg(long)]
    pub sasl_oauthbearer_jwks_file: Option<PathBuf>,
    #[arg(long)]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    #[arg(long)]
    pub sasl_oauthbearer_expected_audience: Option<String>,
    /// KIP-368 session lifetime, ms (0 = no re-authentication required).
    #[arg(long)]
    pub connections_max_reauth_ms: Option<i64>,
    /// Controller listener HOST:PORT of a clustered node.
    #[arg(long)]
    pub controller_listen: Option<String>,
    /// inter.broker.listener.name: the listener (named by its protocol) peers connect to.
    #[arg(long)]
    pub inter_broker_listener_name: Option<String>,
    /// sasl.mechanism.inter.broker.protocol: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long)]
    pub inter_broker_sasl_mechanism: Option<String>,
    /// This broker's SASL user on the inter-broker listener.
    #[arg(long)]
    pub inter_broker_sasl_username: Option<String>,
    /// File holding that user's password.
    #[arg(long)]
    pub inter_broker_sasl_password_file: Option<String>,
    /// PEM CA certificates trusted for peers' TLS certificates.
    #[arg(long)]
    pub inter_broker_tls_ca: Option<String>,
    /// The controller listener with mutual TLS (tls_cert/tls_key, peers signed by
    /// inter_broker_tls_ca).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub controller_listener_tls: Option<bool>,
    /// Metadata quorum voters, ID@HOST:PORT,... (Kafka's controller.quorum.voters). Without
    /// it, one node as always. A --node-id not among them joins the running cluster as an
    /// observer (a broker; AddRaftVoter can then make it a voter).
    #[arg(long)]
    pub quorum: Option<String>,
    /// broker.session.timeout.ms: a clustered broker silent this long is fenced (default 9000).
    #[arg(long)]
    pub broker_session_timeout_ms: Option<u64>,
    /// default.replication.factor for topics created with -1 in a cluster (default 1).
    #[arg(long)]
    pub default_replication_factor: Option<i16>,
    /// replica.lag.time.max.ms: a follower not caught up this long leaves the ISR (default
    /// 30000).
    #[arg(long)]
    pub replica_lag_time_max_ms: Option<u64>,
    /// auto.leader.rebalance.enable: the active controller moves leaderships back to
    /// preferred replicas (default true).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub auto_leader_rebalance_enable: Option<bool>,
    /// leader.imbalance.check.interval.seconds: how often it looks (default 300).
    #[arg(long)]
    pub leader_imbalance_check_interval_seconds: Option<u64>,
    /// leader.imbalance.per.broker.percentage (default 10): accepted for Kafka parity;
    /// Kafka 4.1's KRaft controller does not consult it, nor does kmirror.
    #[arg(long)]
    pub leader_imbalance_per_broker_percentage: Option<u32>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Mirror { args } => mirror_cli::run(args),
        Command::Demo => demo::run(),
        Command::Scram(c) => scram_cli::run(c),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kmirror: {e}");
            ExitCode::FAILURE
        }
    }
}
