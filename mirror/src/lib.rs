//! kmirror-mirror: cluster mirroring (KIP-1279) on top of the Kafka server in `kmirror-net`.
//!
//! Owns: the mirror wire APIs and their codec (`api`) and their authorization answers
//! (`authz`); the Kafka client that talks to the source cluster, with its TLS and SASL
//! (`client`, `client_security`); the per-partition fetchers that copy source batches at their
//! source offsets, with failback (`fetcher`); the byte-rate ceilings they share across cores
//! (`throttle`); the manager that runs one fetcher
//! task per mirrored partition on its owning core (`manager`); the mirror service that applies
//! mirror requests to the coordinator (`service`); and the host that plugs all of it into a
//! running broker and drives the control plane from the "kmirror-mirror" thread (`host`).
//!
//! Must not: be depended on by `kmirror-net` (the broker reaches mirroring only through its
//! `ExtensionApis` seam, which [`host::MirrorBroker`] implements); touch a partition's log
//! except through the engine's router on the owning core; decode or re-encode a mirrored batch
//! (batches pass through as `Bytes`).
//!
//! Invariants: a mirrored partition holds the source's records at the source's offsets; at
//! most one fetcher per partition; every Kafka error code the mirror APIs answer comes from
//! [`keys`] (the broker's single code table, re-exported here).

pub mod api;
pub mod authz;
pub mod client;
pub mod client_security;
pub mod fetcher;
pub mod host;
pub mod interbroker;
pub mod manager;
pub mod metrics;
pub mod replica_fetcher;
pub mod service;
pub mod session;
pub mod throttle;

/// The broker's API keys, error codes and config names: one table for both crates.
pub use kmirror_net::keys;
