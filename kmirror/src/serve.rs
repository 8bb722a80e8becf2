//! `kmirror serve`: load settings, start the broker, print the listen addresses (`kmirror
//! listening on ADDR` for the first listener, then `kmirror listener NAME on ADDR` for each),
//! wait for SIGTERM/SIGINT, shut down cleanly.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kmirror::node::{RunningBroker, ServerConfig};
use kmirror_engine::{Assignment, EngineConfig};
use kmirror_mirror::MirrorCollector;
use kmirror_net::metrics::BrokerCollector;
use prometheus_client::registry::Registry;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::config::ServeConfig;
use crate::ServeArgs;

fn merge(args: ServeArgs) -> Result<ServeConfig, Box<dyn std::error::Error>> {
    let mut c = match &args.config {
        Some(p) => ServeConfig::load(p)?,
        None => ServeConfig::default(),
    };
    if let Some(v) = args.listen {
        c.listen = v;
    }
    if let Some(v) = args.listeners {
        c.listeners = v;
    }
    if let Some(v) = args.tls_cert {
        c.tls_cert = v;
    }
    if let Some(v) = args.tls_key {
        c.tls_key = v;
    }
    if let Some(v) = args.tls_client_ca {
        c.tls_client_ca = v;
    }
    if let Some(v) = args.data_dir {
        c.data_dir = v;
    }
    if let Some(v) = args.node_id {
        c.node_id = v;
    }
    if let Some(v) = args.cores {
        c.cores = v;
    }
    if let Some(v) = args.metrics {
        c.metrics = v;
    }
    if let Some(v) = args.pin_cores {
        c.pin_cores = v;
    }
    if let Some(v) = args.partition_assignment {
        c.partition_assignment = v;
    }
    if let Some(v) = args.socket_request_max_bytes {
        c.socket_request_max_bytes = v;
    }
    if let Some(v) = args.auto_create_topics {
        c.auto_create_topics = v;
    }
    if let Some(v) = args.num_partitions {
        c.num_partitions = v;
    }
    if let Some(v) = args.group_initial_rebalance_delay_ms {
        c.group_initial_rebalance_delay_ms = v;
    }
    if let Some(v) = args.offsets_topic_num_partitions {
        c.offsets_topic_num_partitions = v;
    }
    if let Some(v) = args.transaction_state_log_num_partitions {
        c.transaction_state_log_num_partitions = v;
    }
    if let Some(v) = args.offsets_retention_minutes {
        c.offsets_retention_minutes = v;
    }
    if let Some(v) = args.offsets_retention_check_interval_ms {
        c.offsets_retention_check_interval_ms = v;
    }
    if let Some(v) = args.retention_check_secs {
        c.retention_check_secs = v;
    }
    if let Some(v) = args.log_cleaner_backoff_ms {
        c.log_cleaner_backoff_ms = v;
    }
    if let Some(v) = args.log_cleaner_io_max_bytes_per_second {
        c.log_cleaner_io_max_bytes_per_second = v;
    }
    if let Some(v) = args.log_level {
        c.log_level = v;
    }
    if let Some(v) = args.mirror_version {
        c.mirror_version = v;
    }
    if let Some(v) = args.mirror_byte_rate {
        c.mirror_byte_rate = v;
    }
    if let Some(v) = args.authorizer {
        c.authorizer = v;
    }
    if let Some(v) = args.super_users {
        c.super_users = v;
    }
    if let Some(v) = args.allow_everyone_if_no_acl_found {
        c.allow_everyone_if_no_acl_found = v;
    }
    if let Some(v) = args.sasl_mechanisms {
        c.sasl_mechanisms = v;
    }
    if let Some(v) = args.sasl_oauthbearer_jwks_file {
        c.sasl_oauthbearer_jwks_file = Some(v);
    }
    if let Some(v) = args.sasl_oauthbearer_expected_issuer {
        c.sasl_oauthbearer_expected_issuer = Some(v);
    }
    if let Some(v) = args.sasl_oauthbearer_expected_audience {
        c.sasl_oauthbearer_expected_audience = Some(v);
    }
    if let Some(v) = args.connections_max_reauth_ms {
        c.connections_max_reauth_ms = v;
    }
    if let Some(v) = args.controller_listen {
        c.controller_listen = v;
    }
    if let Some(v) = args.inter_broker_listener_name {
        c.inter_broker_listener_name = v;
    }
    if let Some(v) = args.inter_broker_sasl_mechanism {
        c.inter_broker_sasl_mechanism = v;
    }
    if let Some(v) = args.inter_broker_sasl_username {
        c.inter_broker_sasl_username = v;
    }
    if let Some(v) = args.inter_broker_sasl_password_file {
        c.inter_broker_sasl_password_file = v;
    }
    if let Some(v) = args.inter_broker_tls_ca {
        c.inter_broker_tls_ca = v;
    }
    if let Some(v) = args.controller_listener_tls {
        c.controller_listener_tls = v;
    }
    if let Some(v) = args.quorum {
        c.quorum = v;
    }
    if let Some(v) = args.broker_session_timeout_ms {
        c.broker_session_timeout_ms = v;
    }
    if let Some(v) = args.default_replication_factor {
        c.default_replication_factor = v;
    }
    if let Some(v) = args.replica_lag_time_max_ms {
        c.replica_lag_time_max_ms = v;
    }
    if let Some(v) = args.auto_leader_rebalance_enable {
        c.auto_leader_rebalance_enable = v;
    }
    if let Some(v) = args.leader_imbalance_check_interval_seconds {
        c.leader_imbalance_check_interval_seconds = v;
    }
    if let Some(v) = args.leader_imbalance_per_broker_percentage {
        c.leader_imbalance_per_broker_percentage = v;
    }
    c.validate()?;
    Ok(c)
}

pub(crate) fn run(args: ServeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let c = merge(args)?;
    let voters = c.quorum_voters()?;
    let (inter_broker_listener, inter_broker_security) = c.inter_broker()?;
    let controller_tls = c.controller_tls()?;
    // KRaft combined mode: this node is a voter of the metadata quorum and a broker. Without
    // --quorum it is the only voter of its own (a one-controller quorum).
    let quorum = if voters.is_empty() {
        kmirror_net::cluster::QuorumOptions {
            inter_broker_listener: inter_broker_listener.clone(),
            inter_broker_security: inter_broker_security.clone(),
            ..kmirror_net::cluster::QuorumOptions::single(c.node_id)
        }
    } else {
        kmirror_net::cluster::QuorumOptions {
            controller_listen: c.controller_listen.trim().to_string(),
            voters,
            session_timeout: Some(Duration::from_millis(c.broker_session_timeout_ms.max(100))),
            default_replication_factor: c.default_replication_factor,
            inter_broker_listener: inter_broker_listener.clone(),
            inter_broker_security: inter_broker_security.clone(),
            controller_tls: controller_tls.clone(),
            leader_rebalance: c
                .auto_leader_rebalance_enable
                .then(|| Duration::from_secs(c.leader_imbalance_check_interval_seconds.max(1))),
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&c.log_level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    kmirror_control::mirror::failpoint::init();
    // Register before starting so a signal during startup is not lost.
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    let engine = EngineConfig {
        cores: c.cores,
        pin: c.pin_cores,
        assignment: Assignment::parse(&c.partition_assignment).unwrap_or_default(),
        retention_check: Duration::from_secs(c.retention_check_secs.max(1)),
        cleaner: kmirror_engine::CleanerConfig {
            backoff: Duration::from_millis(c.log_cleaner_backoff_ms.max(10)),
            io_bytes_per_sec: c.log_cleaner_io_max_bytes_per_second,
        },
        replica_lag_time_max_ms: c.replica_lag_time_max_ms.max(2),
        ..EngineConfig::default()
    };
    let mirror = kmirror_mirror::MirrorBroker::open(
        &c.data_dir,
        kmirror_mirror::MirrorSettings {
            feature_level: c.mirror_version,
            byte_rate: c.mirror_byte_rate,
            ..Default::default()
        },
    )?;
    let broker = kmirror::node::start_with(
        ServerConfig {
            listeners: c.listener_specs()?,
            tls: c.tls_files(),
            node_id: c.node_id,
            data_dir: c.data_dir.clone(),
            max_request_bytes: c.socket_request_max_bytes,
            auto_create_topics: c.auto_create_topics,
            default_partitions: c.num_partitions,
            engine,
            authz: c.authz()?,
            sasl: c.sasl_config()?,
            groups: kmirror_control::group::GroupConfig {
                initial_rebalance_delay_ms: c.group_initial_rebalance_delay_ms,
                offsets_topic_num_partitions: c.offsets_topic_num_partitions,
                transaction_state_num_partitions: c.transaction_state_log_num_partitions,
                offsets_topic_replication_factor: c.offsets_topic_replication_factor,
                transaction_state_replication_factor: c.transaction_state_log_replication_factor,
                offsets_retention_ms: c.offsets_retention_minutes.saturating_mul(60_000),
                offsets_retention_check_interval_ms: c.offsets_retention_check_interval_ms,
                migration_policy: kmirror_control::group::MigrationPolicy::parse(
                    &c.group_consumer_migration_policy,
                )
                .unwrap_or_default(),
                ..Default::default()
            },
        },
        Some(mirror.clone()),
        quorum,
    )?;
    if !c.metrics.is_empty() {
        start_metrics(&c.metrics, &broker, &mirror)?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "kmirror listening on {}", broker.addr())?;
        for l in broker.listeners() {
            writeln!(out, "kmirror listener {} on {}", l.name, l.addr)?;
        }
        out.flush()?;
    }
    for l in broker.listeners() {
        tracing::info!(listener = %l.name, addr = %l.addr, advertised = %format!("{}:{}", l.host, l.port), "listening");
    }
    tracing::info!(addr = %broker.addr(), cores = broker.router().cores(), "serving");
    let sig = signals.forever().next();
    tracing::info!(?sig, "shutting down");
    let t = Instant::now();
    // Fetchers first: they run on the engine's cores.
    mirror.shutdown();
    broker.stop();
    tracing::info!(
        elapsed_ms = t.elapsed().as_millis() as u64,
        "stopped cleanly"
    );
    Ok(())
}

/// The Prometheus endpoint (`prometheus-client` registry, OpenMetrics text) on its own
/// thread, off the data path: every family is computed from atomics at scrape time.
fn start_metrics(
    addr: &str,
    broker: &RunningBroker,
    mirror: &kmirror_mirror::MirrorBroker,
) -> Result<(), Box<dyn std::error::Error>> {
    let listener = std::net::TcpListener::bind(addr)?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(BrokerCollector {
        broker: Arc::clone(broker.broker()),
        cores: broker.router().cores(),
    }));
    registry.register_collector(Box::new(MirrorCollector(mirror.metrics().clone())));
    std::thread::Builder::new().name("kmirror-metrics".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 2048];
            let _ = s.read(&mut buf);
            let body = kmirror_net::metrics::render(&registry);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                body.len(),
                body
            );
        }
    })?;
    Ok(())
}
