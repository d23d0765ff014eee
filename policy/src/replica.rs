//! Replica vocabulary shared by every strategy: replica identifiers, service classes,
//! per-replica per-class session loads, and a fixed-size replica set.
//!
//! These exist so that the proxy, the simulator and the policies agree on one meaning of
//! "replica 3", "a premium session" and "the load of a replica" without allocating.

use core::fmt;

/// Largest replica budget a policy accepts. Every per-replica table in this crate is a fixed
/// array of this length, which keeps admission allocation-free.
pub const MAX_REPLICAS: usize = 64;

/// Index of a replica in the configured replica list, `0..K`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplicaId(pub u8);

impl ReplicaId {
    /// Position of this replica in per-replica slices such as the load slice.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The replica at `index`, or `None` when `index` is not below [`MAX_REPLICAS`].
    pub const fn from_index(index: usize) -> Option<ReplicaId> {
        if index < MAX_REPLICAS {
            Some(ReplicaId(index as u8))
        } else {
            None
        }
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replica#{}", self.0)
    }
}

/// Priority class of a client session, fixed at login.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceClass {
    /// Higher-priority class: protected latency under contention.
    Premium,
    /// Best-effort class: absorbs the cost of contention and failures.
    Freemium,
}

impl ServiceClass {
    /// Both classes, premium first.
    pub const ALL: [ServiceClass; 2] = [ServiceClass::Premium, ServiceClass::Freemium];

    /// The other class.
    pub const fn other(self) -> ServiceClass {
        match self {
            ServiceClass::Premium => ServiceClass::Freemium,
            ServiceClass::Freemium => ServiceClass::Premium,
        }
    }

    /// Configuration and admin-console spelling: `premium` or `freemium`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ServiceClass::Premium => "premium",
            ServiceClass::Freemium => "freemium",
        }
    }

    /// Parses the configuration spelling (ASCII case-insensitive).
    pub fn parse(name: &str) -> Option<ServiceClass> {
        if name.eq_ignore_ascii_case("premium") {
            Some(ServiceClass::Premium)
        } else if name.eq_ignore_ascii_case("freemium") {
            Some(ServiceClass::Freemium)
        } else {
            None
        }
    }
}

impl fmt::Display for ServiceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Active sessions of each class on one replica (`loadP(r)`, `loadF(r)` in the paper).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReplicaLoad {
    /// Active premium sessions pinned to the replica.
    pub premium: u32,
    /// Active freemium sessions pinned to the replica.
    pub freemium: u32,
}

/// A load counter would leave its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// A release for a class that has no active session on the replica.
    ReleaseWithoutSession(ServiceClass),
    /// More than `u32::MAX` sessions of one class.
    Overflow(ServiceClass),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::ReleaseWithoutSession(class) => {
                write!(f, "released a {class} session on a replica that has none")
            }
            LoadError::Overflow(class) => write!(f, "{class} session counter overflow"),
        }
    }
}

impl std::error::Error for LoadError {}

impl ReplicaLoad {
    /// Load of one class (`load_c(r)`).
    pub const fn of(self, class: ServiceClass) -> u32 {
        match class {
            ServiceClass::Premium => self.premium,
            ServiceClass::Freemium => self.freemium,
        }
    }

    /// Total load (`load(r) = loadP(r) + loadF(r)`), widened so it cannot overflow.
    pub const fn total(self) -> u64 {
        self.premium as u64 + self.freemium as u64
    }

    /// True when the replica hosts no session at all.
    pub const fn is_idle(self) -> bool {
        self.premium == 0 && self.freemium == 0
    }

    /// Counts one more session of `class`.
    pub fn admitted(&mut self, class: ServiceClass) -> Result<(), LoadError> {
        let counter = self.counter_mut(class);
        *counter = counter.checked_add(1).ok_or(LoadError::Overflow(class))?;
        Ok(())
    }

    /// Counts one session of `class` fewer; refuses to go below zero.
    pub fn released(&mut self, class: ServiceClass) -> Result<(), LoadError> {
        let counter = self.counter_mut(class);
        *counter = counter
            .checked_sub(1)
            .ok_or(LoadError::ReleaseWithoutSession(class))?;
        Ok(())
    }

    fn counter_mut(&mut self, class: ServiceClass) -> &mut u32 {
        match class {
            ServiceClass::Premium => &mut self.premium,
            ServiceClass::Freemium => &mut self.freemium,
        }
    }
}

/// A set of replicas as a bit mask over [`MAX_REPLICAS`] (used for dedicated partitions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReplicaSet(u64);

impl ReplicaSet {
    /// The empty set.
    pub const EMPTY: ReplicaSet = ReplicaSet(0);

    /// The set of the given replicas.
    pub fn of(replicas: &[ReplicaId]) -> ReplicaSet {
        replicas
            .iter()
            .fold(ReplicaSet::EMPTY, |set, &r| set.with(r))
    }

    /// This set plus `replica`; a replica beyond [`MAX_REPLICAS`] is ignored.
    pub const fn with(self, replica: ReplicaId) -> ReplicaSet {
        if replica.index() < MAX_REPLICAS {
            ReplicaSet(self.0 | 1u64 << replica.0)
        } else {
            self
        }
    }

    /// True when `replica` is a member.
    pub const fn contains(self, replica: ReplicaId) -> bool {
        replica.index() < MAX_REPLICAS && self.0 & (1u64 << replica.0) != 0
    }

    /// Number of members.
    pub const fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// True when the set has no member.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True when both sets share a member.
    pub const fn intersects(self, other: ReplicaSet) -> bool {
        self.0 & other.0 != 0
    }

    /// Members in increasing index order.
    pub fn iter(self) -> impl Iterator<Item = ReplicaId> {
        (0..MAX_REPLICAS)
            .filter_map(ReplicaId::from_index)
            .filter(move |&r| self.contains(r))
    }
}
