//! kmirror cluster: the metadata quorum's controller runtime (issue 12, step 1).
//!
//! Owns the network side of the Raft-replicated cluster metadata: the quorum string
//! (`voters`, Kafka's `controller.quorum.voters` format), the controller transport
//! (`transport`: length-prefixed protobuf Raft messages over TCP, one bounded sender per peer,
//! reconnect with backoff, drop when full) and the driver thread (`driver`) that owns a
//! `kmirror_control::quorum::QuorumNode`, ticks it, carries its messages, runs proposals to
//! their end and publishes the applied `ClusterMetadata` (and the replicated ACL set) through
//! callbacks. While it leads, the driver also fences registered brokers it has not heard from
//! within `broker.session.timeout.ms` and unfences them when heard again: Raft messages from a
//! peer are its heartbeats (KRaft combined mode), and the decisions travel as ordinary
//! `FenceBroker` / `UnfenceBroker` proposals.
//!
//! Plain std threads and std::net: it runs beside the control-plane thread and must never
//! depend on glommio, the engine, net or mirror, nor run on an engine core. Invariants: the
//! consensus state machine itself stays in `control` (this crate adds no state that affects
//! what is applied); a proposal's answer is given only after this node applied it (or knows
//! it never will be, or says the outcome is unknown); message loss anywhere here is allowed,
//! because Raft retransmits.

pub mod driver;
pub mod meta_properties;
pub mod transport;
pub mod voters;

pub use driver::{
    Driver, DriverConfig, DriverError, DriverHandle, ProposalError, QuorumStatus, StateChanges,
    VoterChange, VoterError,
};
pub use voters::{parse_quorum, QuorumParseError, Voter};

#[cfg(test)]
mod tests;
