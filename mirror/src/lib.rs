//! kmirror-mirror: cluster mirroring (KIP-1279) on top of the Kafka server in `kmirror-net`.
//!
//! Owns: the mirror wire APIs and their codec (`api`) and their authorization answers
//! (`authz`); the Kafka client that talks to the source cluster, with its TLS and SASL
//! (`client`: the node's client stack from `kmirror-net` plus the mirror APIs); the per-partition fetchers that copy source batches at their
//! source offsets, with failback (`fetcher`); the byte-rate ceilings they share across cores
//! (`throttle`); the manager that runs one fetcher
//! task per mirrored partition on its owning core (`manager`); the mirror service that applies
//! mirror requests to the coordinator (`service`); and the host that plugs all of it into a
//! running broker and drives the control plane from the "kmirror-mirror" thread (`host`).
//!
//! Must not: be depended on by `kmirror-net` (the broker reaches mirroring only through its
//! `ExtensionApis` seam, which [`MirrorBroker`] implements, and mirroring reaches the broker
//! only through `kmirror_net::mirror_deps::MirrorDeps`, never the `Broker` itself); run the
//! cluster's own replication (the node does, with net's replication module); touch a partition's log
//! except through the engine's router on the owning core; decode or re-encode a mirrored batch
//! (batches pass through as `Bytes`).
//!
//! Invariants: a mirrored partition holds the source's records at the source's offsets; at
//! most one fetcher per partition; every Kafka error code the mirror APIs answer comes from
//! [`keys`] (the broker's single code table, re-exported here).

pub mod api;
pub mod client;

mod authz;
mod fetcher;
mod host;
mod manager;
mod metrics;
mod service;
mod session;
mod throttle;
pub mod verify;

// The surface other crates use; the modules behind it are private.
// `Source` and its answer types are public so a benchmark can drive a `PartitionFetcher`
// from recorded Fetch responses (benches/benches/mirror.rs).
pub use fetcher::{
    dry_run_plan, fetcher_client_id, mirror_partition, prepare_partition, DryRunRow,
    EngineLocalPartition, EpochEnd, FetchEvent, FetchObserver, FetchOutcome, FetchedRecords,
    FetcherConfig, KafkaSource, LmeOrigin, LocalError, LocalPartition, PartitionAnswer,
    PartitionFetcher, Source, SourceError, SourceLeader, Step,
};
pub use host::{MirrorBroker, MirrorSettings};
pub use manager::{FetchTask, FetcherManager};
pub use metrics::MirrorCollector;
pub use service::{LivePartition, MirrorLiveStatus, MirrorService};

/// The broker's API keys, error codes and config names: one table for both crates.
pub use kmirror_net::keys;
