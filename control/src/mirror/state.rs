//! The mirror partition state machine (KIP-1279 seeds 000/003).
//!
//! ```text
//!            add                 truncated            pause
//! UNKNOWN ─────────▶ PREPARING ───────────▶ MIRRORING ─────▶ PAUSED
//! STOPPED ─────────▶     │  ▲                │  ▲  ◀─────────  │
//!  ▲  (re-add/failback)  │  └── retry ── FAILED ◀┘  resume      │
//!  │                     │            │    ▲                    │
//!  │                     ▼            ▼    └── bad batch/error  │
//!  └──────────────── STOPPING ◀───────────── remove (failover) ─┘
//! ```
//!
//! Remove (failover) is accepted from PREPARING and MIRRORING (seed 003), and also from PAUSED
//! and FAILED: a disaster does not wait for an operator to resume a paused or broken
//! partition first. STOPPING always ends in STOPPED (its steps are idempotent and re-run after
//! a crash). FAILED is retried with backoff, back to PREPARING (re-check truncation) or
//! straight to MIRRORING.

use serde::{Deserialize, Serialize};

/// State of one mirror partition on the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum PartitionState {
    Unknown,
    Preparing,
    Mirroring,
    Paused,
    Stopping,
    Stopped,
    Failed,
}

/// A mirror's health as one state (DescribeMirrors, ListMirrors, the metrics): what an
/// operator watches instead of N partition rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LinkState {
    /// Every partition not yet failed over is mirroring, preparing or failing over.
    Active,
    /// Every partition not yet failed over is paused.
    Paused,
    /// Some partitions are FAILED (the others go on).
    Degraded,
    /// The mirror's metadata rounds with the source fail: the source is unreachable or
    /// refuses the mirror (the whole link is down, whatever the partitions last showed).
    SourceUnavailable,
}

impl LinkState {
    pub const ALL: [LinkState; 4] = [
        LinkState::Active,
        LinkState::Paused,
        LinkState::Degraded,
        LinkState::SourceUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Active => "ACTIVE",
            LinkState::Paused => "PAUSED",
            LinkState::Degraded => "DEGRADED",
            LinkState::SourceUnavailable => "SOURCE_UNAVAILABLE",
        }
    }

    /// From the states of the mirror's partitions and whether its rounds with the source
    /// are failing.
    pub fn of(states: impl IntoIterator<Item = PartitionState>, source_failing: bool) -> Self {
        if source_failing {
            return LinkState::SourceUnavailable;
        }
        let live: Vec<PartitionState> = states
            .into_iter()
            .filter(|s| *s != PartitionState::Stopped)
            .collect();
        if live.contains(&PartitionState::Failed) {
            LinkState::Degraded
        } else if !live.is_empty() && live.iter().all(|s| *s == PartitionState::Paused) {
            LinkState::Paused
        } else {
            LinkState::Active
        }
    }
}

impl PartitionState {
    /// Every state, in wire-code order.
    pub const ALL: [PartitionState; 7] = [
        PartitionState::Unknown,
        PartitionState::Preparing,
        PartitionState::Mirroring,
        PartitionState::Paused,
        PartitionState::Stopping,
        PartitionState::Stopped,
        PartitionState::Failed,
    ];

    /// Upper-case name, as DescribeMirrors reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            PartitionState::Unknown => "UNKNOWN",
            PartitionState::Preparing => "PREPARING",
            PartitionState::Mirroring => "MIRRORING",
            PartitionState::Paused => "PAUSED",
            PartitionState::Stopping => "STOPPING",
            PartitionState::Stopped => "STOPPED",
            PartitionState::Failed => "FAILED",
        }
    }

    /// `int8` code used by ReadMirrorStates / WriteMirrorStates.
    pub fn code(self) -> i8 {
        self as i8
    }

    pub fn from_code(code: i8) -> Option<Self> {
        Self::ALL.get(usize::try_from(code).ok()?).copied()
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
    }

    /// Whether a partition in this state is read-only on the destination (Produce,
    /// DeleteRecords, ... refused with READ_ONLY_TOPIC). Only STOPPED (and never-mirrored
    /// UNKNOWN) partitions accept writes: STOPPING is still read-only until truncation is done.
    pub fn is_read_only(self) -> bool {
        !matches!(self, PartitionState::Stopped | PartitionState::Unknown)
    }

    /// Whether a fetcher should be running for a partition in this state.
    pub fn wants_fetcher(self) -> bool {
        self == PartitionState::Mirroring
    }

    /// Whether `self -> to` is a legal transition.
    pub fn can_transition_to(self, to: PartitionState) -> bool {
        use PartitionState::*;
        matches!(
            (self, to),
            (Unknown, Preparing)
                | (Stopped, Preparing)
                | (Preparing, Mirroring)
                | (Preparing, Failed)
                | (Preparing, Stopping)
                | (Mirroring, Paused)
                | (Mirroring, Failed)
                | (Mirroring, Stopping)
                | (Paused, Mirroring)
                | (Paused, Stopping)
                | (Failed, Preparing)
                | (Failed, Mirroring)
                | (Failed, Stopping)
                | (Stopping, Stopped)
        )
    }
}

impl std::fmt::Display for PartitionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The failover (STOPPING) steps of seed 000, in order. Each completed step is recorded in
/// `__mirror_state` so that a restart resumes after the last completed one and no step with a
/// visible effect (the epoch bump, the PID-reset marker) is done twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FailoverStep {
    /// Fetchers for the partition are stopped.
    FetchersStopped,
    /// Local leader epoch raised above every epoch in the log.
    EpochBumped,
    /// Log truncated to its LSO.
    TruncatedToLso,
    /// Last mirrored epoch persisted.
    LmePersisted,
    /// MIRROR_PID_RESET control record appended.
    PidResetWritten,
}

impl FailoverStep {
    pub const ORDER: [FailoverStep; 5] = [
        FailoverStep::FetchersStopped,
        FailoverStep::EpochBumped,
        FailoverStep::TruncatedToLso,
        FailoverStep::LmePersisted,
        FailoverStep::PidResetWritten,
    ];

    /// The step after this one, or None when this was the last.
    pub fn next(self) -> Option<FailoverStep> {
        let i = Self::ORDER.iter().position(|s| *s == self)?;
        Self::ORDER.get(i + 1).copied()
    }
}

/// Mirror-API error a state forbids, for Pause/Resume/Remove/Add validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRefusal {
    /// Pause on PAUSED.
    AlreadyPaused,
    /// Resume on anything but PAUSED.
    NotPaused,
    /// Pause/Resume on STOPPING or STOPPED.
    BeingRemoved,
    /// Add on a partition that is already mirrored (not UNKNOWN/STOPPED).
    AlreadyInMirror,
    /// Other illegal request for the state (INVALID_REQUEST).
    Invalid,
}

/// What a user operation asks of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserOp {
    Add,
    Remove,
    Pause,
    Resume,
}

impl UserOp {
    /// Target state of the operation from `from`, or why it is refused. Removing a STOPPING or
    /// STOPPED partition is answered as a no-op success (`Ok(from)`) so failover is idempotent.
    pub fn target(self, from: PartitionState) -> Result<PartitionState, StateRefusal> {
        use PartitionState::*;
        match (self, from) {
            (UserOp::Add, Unknown | Stopped) => Ok(Preparing),
            (UserOp::Add, _) => Err(StateRefusal::AlreadyInMirror),
            (UserOp::Remove, Stopping | Stopped) => Ok(from),
            (UserOp::Remove, Unknown) => Err(StateRefusal::Invalid),
            (UserOp::Remove, _) => Ok(Stopping),
            (UserOp::Pause, Paused) => Err(StateRefusal::AlreadyPaused),
            (UserOp::Pause, Stopping | Stopped) => Err(StateRefusal::BeingRemoved),
            (UserOp::Pause, Mirroring) => Ok(Paused),
            (UserOp::Pause, _) => Err(StateRefusal::Invalid),
            (UserOp::Resume, Paused) => Ok(Mirroring),
            (UserOp::Resume, Stopping | Stopped) => Err(StateRefusal::BeingRemoved),
            (UserOp::Resume, _) => Err(StateRefusal::NotPaused),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn link_state_summarises_the_partitions_and_the_source() {
        use PartitionState::*;
        assert_eq!(
            LinkState::of([Mirroring, Stopped], false),
            LinkState::Active
        );
        assert_eq!(LinkState::of([], false), LinkState::Active);
        assert_eq!(
            LinkState::of([Paused, Stopped, Paused], false),
            LinkState::Paused
        );
        assert_eq!(LinkState::of([Paused, Mirroring], false), LinkState::Active);
        assert_eq!(
            LinkState::of([Failed, Mirroring], false),
            LinkState::Degraded
        );
        assert_eq!(
            LinkState::of([Mirroring], true),
            LinkState::SourceUnavailable
        );
    }

    use super::PartitionState::*;
    use super::*;

    #[test]
    fn seed_lifecycle_paths_are_legal() {
        // Start, pause/resume, failover, failback.
        let path = [
            Unknown, Preparing, Mirroring, Paused, Mirroring, Stopping, Stopped, Preparing,
            Mirroring, Failed, Mirroring,
        ];
        for w in path.windows(2) {
            assert!(w[0].can_transition_to(w[1]), "{} -> {}", w[0], w[1]);
        }
    }

    #[test]
    fn illegal_transitions_are_refused() {
        for (from, to) in [
            (Unknown, Mirroring),
            (Stopped, Mirroring),
            (Stopping, Mirroring),
            (Stopped, Stopping),
            (Mirroring, Stopped),
            (Paused, Failed),
            (Mirroring, Unknown),
            (Stopping, Preparing),
        ] {
            assert!(
                !from.can_transition_to(to),
                "{from} -> {to} must be illegal"
            );
        }
        for s in PartitionState::ALL {
            assert!(!s.can_transition_to(s), "self-transition {s}");
        }
    }

    #[test]
    fn only_stopped_or_unmirrored_partitions_are_writable() {
        let writable: Vec<_> = PartitionState::ALL
            .into_iter()
            .filter(|s| !s.is_read_only())
            .collect();
        assert_eq!(writable, vec![Unknown, Stopped]);
    }

    #[test]
    fn codes_and_names_round_trip() {
        for s in PartitionState::ALL {
            assert_eq!(PartitionState::from_code(s.code()), Some(s));
            assert_eq!(PartitionState::parse(s.as_str()), Some(s));
        }
        assert_eq!(PartitionState::from_code(7), None);
        assert_eq!(PartitionState::from_code(-1), None);
    }

    #[test]
    fn user_ops_map_to_seed_error_codes() {
        assert_eq!(
            UserOp::Pause.target(Paused),
            Err(StateRefusal::AlreadyPaused)
        );
        assert_eq!(
            UserOp::Resume.target(Mirroring),
            Err(StateRefusal::NotPaused)
        );
        assert_eq!(
            UserOp::Resume.target(Stopping),
            Err(StateRefusal::BeingRemoved)
        );
        assert_eq!(
            UserOp::Add.target(Mirroring),
            Err(StateRefusal::AlreadyInMirror)
        );
        assert_eq!(UserOp::Add.target(Stopped), Ok(Preparing));
        assert_eq!(UserOp::Remove.target(Paused), Ok(Stopping));
        assert_eq!(
            UserOp::Remove.target(Stopped),
            Ok(Stopped),
            "idempotent failover"
        );
        // Every Ok target other than a no-op is a legal transition.
        for op in [UserOp::Add, UserOp::Remove, UserOp::Pause, UserOp::Resume] {
            for s in PartitionState::ALL {
                if let Ok(t) = op.target(s) {
                    assert!(t == s || s.can_transition_to(t), "{op:?} {s} -> {t}");
                }
            }
        }
    }

    #[test]
    fn failover_steps_run_in_seed_order() {
        let mut s = FailoverStep::FetchersStopped;
        let mut seen = vec![s];
        while let Some(n) = s.next() {
            assert!(n > s);
            seen.push(n);
            s = n;
        }
        assert_eq!(seen, FailoverStep::ORDER.to_vec());
    }
}
