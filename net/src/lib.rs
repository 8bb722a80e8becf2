//! kmirror-net: the Kafka protocol server. Mirroring lives in `kmirror-mirror`, which plugs in
//! through one seam, [`ExtensionApis`] (extra API keys, their versions, and a hook once the
//! broker has started); this crate does not depend on it.
//!
//! Owns: framing with the size check before allocation (`frame`), the ACL APIs over the
//! durable store (`acl`), the per-API authorization table (`authz`), the served API table and
//! ApiVersions with KIP-511 fallback (`versions`), the listener list (`listeners`: several
//! `PROTOCOL://HOST:PORT`, each advertised to the clients that use it), TLS and certificate
//! principals (`tls`), SASL authentication and the SCRAM credential APIs (`sasl`), client quotas and
//! their produce/fetch byte-rate enforcement (`quota`), the Kafka client with its TLS and SASL
//! (`client`: one stack for peers, mirror sources and the CLI), in-cluster replication, leader
//! and follower side (`replication`), the
//! per-core listeners and connection loop (`server`), the API handlers (`handlers`), share
//! groups' record delivery on the partition leaders and their share sessions (`share_fetch`),
//! zero-copy Fetch response writing (`fetch_encode`; under TLS the chunks are encrypted, so
//! copied), the single internal-error → Kafka-code mapping
//! (`errors`), the broker's view of cluster metadata (`cluster`), the seam mirroring reaches
//! the broker through (`mirror_deps`), and the broker's startup tasks on the cores
//! (`startup`: serve a core, register, convert old internal topics). The node that wires the
//! quorum's controller, the coordinators, the broker and the engine together is the
//! `kmirror` crate's `node`.
//!
//! Must not: depend on the mirror crate or talk to other clusters (the client here reaches
//! this cluster's peers; the mirror crate uses it for sources);
//! touch a partition's log except through the engine's router (the owning core); re-encode
//! record batches (they pass through as `Bytes`).
//!
//! Invariants: a malformed frame, unknown key or unsupported version closes only that
//! connection (ApiVersions answers instead, per KIP-511); every error code a client sees
//! comes from `errors`.

pub mod acl;
pub mod authz;
pub mod broker;
pub mod client;
pub mod cluster;
pub mod conn_limits;
mod conn_quota;
pub mod coordinator_partitions;
mod errors;
mod features;
mod fetch_encode;
mod fetch_session;
pub mod frame;
pub mod groups;
mod handlers;
pub mod interbroker;
pub mod keys;
pub mod listeners;
pub mod metrics;
pub mod mirror_deps;
pub mod quota;
mod replication;
pub mod sasl;
pub mod server;
pub mod session;
pub mod share_fetch;
pub mod startup;
pub mod tls;
pub mod txn_markers;
mod versions;

pub use broker::{Broker, BrokerConfig, Ctx, EngineMarkerSink, ExtensionApis};
pub use cluster::Cluster;
pub use listeners::{Endpoint, ListenerSpec};
pub use tls::TlsFiles;
