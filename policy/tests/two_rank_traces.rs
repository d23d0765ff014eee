//! The two-rank PLB pinned to the outcomes of the paper's two-class implementation.
//!
//! Until issue 24, `pgtier-policy` kept a separate two-class PLB next to the tiered one. Before
//! it was deleted, the walks below were run through it and a digest of every outcome recorded
//! here: every admission (replica, rule, role changes), every apply result (fresh and stale
//! snapshots), every return evaluation, every Down / Rejoin repair, every drain decision, and
//! the target vector of every survivor count. [`Plb`] is now the two-rank configuration of
//! [`pgtier_policy::tiers`], and must still produce those exact outcomes, on both load signals
//! and with the recovery drain on and off.
//!
//! Run with `PGTIER_PRINT_TRACES=1` to print the digests when a deliberate behaviour change
//! needs them regenerated, and with `PGTIER_TRACE_DIR=DIR` to write every full trace there
//! (to compare against a tree that still matches).

mod common;

use std::fmt::Write as _;

use common::*;
use pgtier_policy::{
    LoadSignal, Loads, Plb, PlbParams, ReplicaId, ReplicaLoad, RoleTable, ServiceClass, SplitMix64,
};

/// One open session: where it is pinned, its class, whether a transaction is in flight.
#[derive(Clone, Copy)]
struct Session {
    replica: ReplicaId,
    class: ServiceClass,
    in_flight: bool,
}

struct Walk {
    plb: Plb,
    table: RoleTable,
    stale: RoleTable,
    sessions: Vec<Session>,
    out: String,
}

impl Walk {
    fn new(plb: Plb, table: RoleTable) -> Walk {
        Walk {
            plb,
            stale: table.clone(),
            table,
            sessions: Vec::new(),
            out: String::new(),
        }
    }

    fn counts(&self) -> (Vec<ReplicaLoad>, Vec<ReplicaLoad>) {
        let mut sessions = vec![ReplicaLoad::default(); self.table.len()];
        let mut in_flight = sessions.clone();
        for s in &self.sessions {
            sessions[s.replica.index()]
                .admitted(s.class)
                .expect("in range");
            if s.in_flight {
                in_flight[s.replica.index()]
                    .admitted(s.class)
                    .expect("in range");
            }
        }
        (sessions, in_flight)
    }

    fn signal<'a>(&self, sessions: &'a [ReplicaLoad], in_flight: &'a [ReplicaLoad]) -> Loads<'a> {
        match self.plb.load_signal() {
            LoadSignal::Sessions => Loads::sessions(sessions),
            LoadSignal::InFlight => Loads {
                signal: in_flight,
                sessions,
            },
        }
    }

    fn admit(&mut self, class: ServiceClass, stale: bool, in_flight: bool) {
        let (sessions, flight) = self.counts();
        let loads = self.signal(&sessions, &flight);
        let view = if stale { &self.stale } else { &self.table };
        let admission = self.plb.admit_loads(view, loads, class);
        let _ = writeln!(self.out, "admit {class} stale={stale}: {admission:?}");
        let Ok(admission) = admission else { return };
        for change in admission.role_changes.iter() {
            let applied = self.table.apply(change, self.plb.params());
            let _ = writeln!(self.out, "  apply {change}: {applied:?}");
        }
        self.sessions.push(Session {
            replica: admission.replica,
            class,
            in_flight,
        });
    }

    fn step(&mut self, rng: &mut SplitMix64, replicas: u64) {
        match rng.below(40) {
            0..=13 => {
                let class = if rng.below(2) == 0 {
                    ServiceClass::Premium
                } else {
                    ServiceClass::Freemium
                };
                let stale = rng.below(6) == 0;
                let in_flight = rng.below(2) == 0;
                self.admit(class, stale, in_flight);
            }
            14..=23 => {
                if !self.sessions.is_empty() {
                    let i = rng.below(self.sessions.len() as u64) as usize;
                    let s = self.sessions.swap_remove(i);
                    let _ = writeln!(self.out, "close {} {}", s.replica, s.class);
                }
            }
            24..=27 => {
                if !self.sessions.is_empty() {
                    let i = rng.below(self.sessions.len() as u64) as usize;
                    self.sessions[i].in_flight = !self.sessions[i].in_flight;
                }
            }
            28..=30 => {
                let replica = ReplicaId(rng.below(replicas) as u8);
                self.sessions.retain(|s| s.replica != replica);
                let (sessions, _) = self.counts();
                let changes = self.plb.handle_down(&mut self.table, replica, &sessions);
                let _ = writeln!(self.out, "down {replica}: {changes:?} -> {}", self.table);
            }
            31..=32 => {
                let replica = ReplicaId(rng.below(replicas) as u8);
                let (sessions, _) = self.counts();
                let changes = self.plb.handle_rejoin(&mut self.table, replica, &sessions);
                let _ = writeln!(self.out, "rejoin {replica}: {changes:?} -> {}", self.table);
            }
            33..=34 => {
                let (sessions, flight) = self.counts();
                let loads = self.signal(&sessions, &flight);
                let returns = self.plb.returns_loads(&self.table, loads);
                let _ = writeln!(self.out, "returns: {returns:?}");
            }
            35..=37 => {
                if !self.sessions.is_empty() {
                    let i = rng.below(self.sessions.len() as u64) as usize;
                    let s = self.sessions[i];
                    let (sessions, flight) = self.counts();
                    let loads = self.signal(&sessions, &flight);
                    let moves = self.plb.drain_move(&self.table, loads, s.replica, s.class);
                    let _ = writeln!(self.out, "drain {} {}: {moves}", s.replica, s.class);
                    if moves {
                        self.sessions.swap_remove(i);
                        self.admit(s.class, false, s.in_flight);
                    }
                }
            }
            _ => {
                self.stale = self.table.clone();
                let (sessions, _) = self.counts();
                let mut scratch = self.table.clone();
                let repaired = self.plb.repair(&mut scratch, &sessions);
                let _ = writeln!(self.out, "repair: {repaired:?} -> {scratch}");
            }
        }
        let _ = writeln!(self.out, "table {}", self.table);
    }
}

fn layout_of(choice: u64) -> RoleTable {
    match choice {
        0 => layout(6, &[0, 1], &[2, 3]),
        1 => layout(6, &[0], &[1, 2, 3]),
        2 => layout(6, &[0, 1, 2], &[3]),
        3 => layout(6, &[0, 1, 2], &[3, 4, 5]),
        4 => layout(5, &[0, 1], &[2, 3]),
        5 => layout(8, &[0, 1, 2], &[3, 4, 5]),
        6 => layout(3, &[0], &[1]),
        _ => layout(4, &[0], &[1, 2]),
    }
}

fn params_of(rng: &mut SplitMix64) -> PlbParams {
    let alphas = [0.5, 0.6, 0.8, 1.0];
    PlbParams::PAPER
        .with_theta(P, 2 + rng.below(5) as u32)
        .with_theta(F, 2 + rng.below(5) as u32)
        .with_alpha(P, alphas[rng.below(4) as usize])
        .with_alpha(F, alphas[rng.below(4) as usize])
        .with_floor(F, rng.below(3) as u32)
        .with_target(P, rng.below(3) as u32)
        .with_target(F, rng.below(3) as u32)
}

/// The parameters as the two-class implementation printed them (its `Debug`), so the
/// recorded digests stay comparable.
fn paper_names(p: &PlbParams) -> String {
    format!(
        "PlbParams {{ theta_premium: {:?}, theta_freemium: {:?}, alpha_premium: {:?}, \
         alpha_freemium: {:?}, freemium_floor: {:?}, premium_target: {:?}, freemium_target: {:?} }}",
        p.theta(P),
        p.theta(F),
        p.alpha(P),
        p.alpha(F),
        p.floor(F),
        p.target(P),
        p.target(F),
    )
}

/// Case `seed`'s full trace, or `None` when its parameters do not validate.
fn trace(seed: u64) -> Option<String> {
    let mut rng = SplitMix64::new(seed);
    let table = layout_of(rng.below(8));
    let params = params_of(&mut rng);
    let signal = LoadSignal::ALL[rng.below(2) as usize];
    let drain = rng.below(2) == 0;
    let plb = Plb::new(params, &table)
        .ok()?
        .with_load_signal(signal)
        .with_recovery_drain(drain);
    let mut walk = Walk::new(plb, table);
    let names = paper_names(&params);
    let _ = writeln!(walk.out, "{names} {signal} drain={drain} {}", walk.table);
    let reference = walk.plb.reference();
    let _ = writeln!(walk.out, "reference {reference}");
    for survivors in 0..=walk.table.len() {
        let _ = writeln!(
            walk.out,
            "target {survivors}: {}",
            walk.plb.target(survivors)
        );
    }
    let replicas = walk.table.len() as u64;
    for _ in 0..400 {
        walk.step(&mut rng, replicas);
    }
    Some(walk.out)
}

/// The paper's deployment, on its parameters, over a longer walk.
fn paper_trace(signal: LoadSignal, drain: bool) -> String {
    let plb = paper_plb()
        .with_load_signal(signal)
        .with_recovery_drain(drain);
    let mut walk = Walk::new(plb, paper_table());
    let mut rng = SplitMix64::new(14);
    for _ in 0..4_000 {
        walk.step(&mut rng, 5);
    }
    walk.out
}

/// FNV-1a, 64 bits.
fn digest(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

const CASES: u64 = 160;

fn print_requested() -> bool {
    std::env::var_os("PGTIER_PRINT_TRACES").is_some()
}

#[test]
fn random_walks_match_the_two_class_outcomes() {
    let dir = std::env::var_os("PGTIER_TRACE_DIR").map(std::path::PathBuf::from);
    let mut digests = Vec::new();
    for seed in 0..CASES {
        let Some(text) = trace(seed) else { continue };
        if let Some(dir) = &dir {
            std::fs::write(dir.join(format!("{seed}.txt")), &text).expect("trace written");
        }
        digests.push((seed, digest(&text)));
    }
    if print_requested() {
        for (seed, d) in &digests {
            println!("    ({seed}, 0x{d:016x}),");
        }
    }
    assert_eq!(digests.len(), EXPECTED.len(), "valid cases");
    for ((seed, got), (expected_seed, expected)) in digests.iter().zip(EXPECTED) {
        assert_eq!(seed, expected_seed);
        assert_eq!(got, expected, "case {seed} differs from the two-class PLB");
    }
}

#[test]
fn the_paper_deployment_matches_the_two_class_outcomes() {
    let mut got = Vec::new();
    let dir = std::env::var_os("PGTIER_TRACE_DIR").map(std::path::PathBuf::from);
    for signal in LoadSignal::ALL {
        for drain in [false, true] {
            let text = paper_trace(signal, drain);
            if let Some(dir) = &dir {
                let name = format!("paper-{signal}-{drain}.txt");
                std::fs::write(dir.join(name), &text).expect("trace written");
            }
            got.push(digest(&text));
        }
    }
    if print_requested() {
        for d in &got {
            println!("    0x{d:016x},");
        }
    }
    assert_eq!(got, PAPER_EXPECTED);
}

const PAPER_EXPECTED: [u64; 4] = [
    0xef0860a703cfc7ea,
    0x77f1af1e66887c5c,
    0x3cbc82d3968c8a64,
    0xffee35c375d5792a,
];

/// `(seed, digest)` of every case whose parameters validate, recorded from the two-class PLB.
const EXPECTED: &[(u64, u64)] = &[
    (0, 0xf6594c06d7d3dfd0),
    (1, 0x06471e63468df014),
    (2, 0x12bbc65fbc1f6124),
    (3, 0x96af831c89a46df2),
    (4, 0x3e588c64e9c7b311),
    (5, 0x6d79f53921c2ef98),
    (6, 0x09a5c5e1b822ed32),
    (7, 0x2c77c740f0f22b62),
    (8, 0xa6f56a352b8bc78f),
    (9, 0x1c84ab37244acb0b),
    (10, 0xae2f87c09a5fc80c),
    (11, 0xcf6542ff7272c583),
    (12, 0x2c5da579e201e5ed),
    (13, 0xbe8a90fd64481385),
    (14, 0x5e848f526e9287d2),
    (15, 0x9fd2f02b01f1145a),
    (16, 0x5c4241a461428309),
    (17, 0x6e40a8262e2549a7),
    (18, 0x9e60995c2d221839),
    (19, 0x312ec3b0d19a8275),
    (20, 0x2553baa5d6b655c0),
    (21, 0x319b03bfb5e6908d),
    (23, 0x2b48794a6039a01a),
    (24, 0x240e327e8a3b230c),
    (25, 0x15bf40348682ee69),
    (26, 0x9070120719ed153f),
    (27, 0xa8804edf9176f483),
    (28, 0x38d6bca55a0c22d2),
    (29, 0x37b8307092f77274),
    (30, 0xea18121fd623a466),
    (31, 0xc00b698d761898bb),
    (32, 0x94507592fcf0565c),
    (33, 0x0954bc101a92b850),
    (34, 0xd52e63bfd3b68919),
    (35, 0xc84fa17be5dbd283),
    (36, 0x8db09fa52ed01d6d),
    (37, 0x615a9886a9489a9a),
    (38, 0x990689a39c8c8dbe),
    (39, 0x21aa7a7837b24ec9),
    (40, 0xfbce2c48481b0a65),
    (41, 0x423ee09055a0028f),
    (42, 0xbaf57545febd2a2d),
    (43, 0x2da8ecc1b73cebbf),
    (44, 0xaec2c15305b1761d),
    (45, 0x637e1576e74f1993),
    (46, 0x39038278998ffeee),
    (47, 0xe673f808d17d3867),
    (48, 0x7d849fa78314593f),
    (49, 0xaefa1756e202b3a1),
    (50, 0x0c1ab0ec04ae21df),
    (52, 0xf89dc13393386758),
    (53, 0xb525ba3c73892211),
    (54, 0x4d805686aa9c7e3f),
    (55, 0x092fdc9d4405b094),
    (56, 0xc679089cf7786337),
    (57, 0x3a945c931c779a44),
    (58, 0x6928c63943d58cc8),
    (59, 0x65441f2bdf14d3c2),
    (60, 0x2740561fd3101369),
    (61, 0x9a92391018c3d535),
    (62, 0x81d830e5d0607903),
    (63, 0x8907814c8ebe661d),
    (64, 0x5c2b2678bbd3d9f6),
    (65, 0xf355c30d5b978e09),
    (66, 0xcfbd3b393b7fafea),
    (67, 0x6a63e3b320ab100c),
    (68, 0xd4577f1976946a06),
    (70, 0x1ab136844ac17c5f),
    (71, 0x251137062e06ead0),
    (72, 0xe919f82be0198107),
    (74, 0xf50831602465788c),
    (75, 0xa74ba00938e06810),
    (76, 0x90e0bdc40a905d25),
    (77, 0x91ea5adae9c14955),
    (79, 0xc0fd3267d19c9ad3),
    (80, 0x8297e59ee908208c),
    (81, 0xe0df146ddd2a8495),
    (82, 0xce14fa7984be64cd),
    (83, 0xb9c6567d06d22fd0),
    (85, 0x5c9911f744d5fc86),
    (87, 0x3d8f08516461306d),
    (88, 0x7e49cb401cd9ccf4),
    (90, 0x9e85bb94e2e0f1e5),
    (91, 0xd605244e0eb11724),
    (92, 0xd10a98eeacea2776),
    (93, 0x898874d29bb2b23e),
    (94, 0xfa90589adff5fb40),
    (95, 0xb4eb7ffc34566965),
    (96, 0xcd9d841dbf7f9643),
    (97, 0x9ddd62f8a7244be9),
    (98, 0x18fa6bf8d013fb5f),
    (99, 0x3134f69fdf7a5e1e),
    (100, 0xb6a5c520bdbf359a),
    (101, 0x70bdda041c5b0fda),
    (102, 0xafc2a1c3c632f244),
    (103, 0xca90b988e027f459),
    (104, 0xdef9f51b09835274),
    (105, 0xd1823293e28552b8),
    (106, 0xa66156671626700e),
    (107, 0x9eea52cf7ff32409),
    (108, 0x8329762233455f4a),
    (109, 0xfa4b27661bb2a3bc),
    (110, 0x17e0a110092d6089),
    (111, 0x2c0f21ff5889b1d4),
    (112, 0x80b651350800ee54),
    (113, 0x32752d2d1cd04efa),
    (114, 0x706ef7392a805cc6),
    (116, 0x7af5f4a3092c40f1),
    (118, 0x3ffd7cf0cec00801),
    (119, 0xd9880b764837fffb),
    (120, 0x3ae2d73e65bedc3b),
    (121, 0x0fb452e533c0f7fc),
    (122, 0xccbc7b4eda635f31),
    (123, 0x87cb159cc231ab06),
    (124, 0x4380667cbd4bd633),
    (125, 0x681369d442a302f7),
    (126, 0x462c6329aad6522b),
    (127, 0x4208dd2b2ed0b719),
    (128, 0x6d05ec46838b30bf),
    (129, 0xd6e05d90b0810109),
    (130, 0x5b480a5f3d9f3c6e),
    (131, 0xdd26f68c8d7259c3),
    (132, 0xb6573fb30414dcf5),
    (133, 0x94d696cc4af31767),
    (134, 0x2790f6a5aa17537a),
    (135, 0x63cad16cc9e4ef6d),
    (136, 0xde4fda455edf97b6),
    (137, 0xc84d6042b13a2fdf),
    (138, 0x272884a03a381052),
    (139, 0xf1728cd23344908c),
    (140, 0xa0864f00b721685f),
    (141, 0xca54739df7ddf4ac),
    (142, 0x3fff083dc73c812d),
    (143, 0x20691c1d2d362875),
    (144, 0x0c6744f9e84f43b7),
    (146, 0x5be7e7621a562fa4),
    (147, 0x011f996090b72ad2),
    (148, 0x6a8dec52ce99de41),
    (149, 0xac21182bf5e1c527),
    (150, 0xb53d648c289e710e),
    (151, 0x477ae2dac51f5fdd),
    (152, 0x204168e3ac5bd2bc),
    (153, 0x6a15b40d4cfbfb9a),
    (154, 0xf2f71f6b92244a04),
    (155, 0xe11f04516f20d33c),
    (156, 0xf707d7cdfebc0e8f),
    (157, 0x3376e2abb9a4e23a),
    (158, 0x436ab94862497314),
    (159, 0xf654768d2bcf9f98),
];
