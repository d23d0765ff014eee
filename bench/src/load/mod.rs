//! `pgtier-load`: the live version of the PLB paper's experiment — sessions of two to four
//! service classes (premium, freemium, then tier2 and tier3) arrive as Poisson processes,
//! each runs analytical queries with think time for its lifetime against a real PostgreSQL
//! (through pgtier or not), logging in as its class's user.
//!
//! Layers: `classes` (the classes of a run as the command line defines them), `schedule`
//! (the whole workload as a pure function of a seed, so every routing strategy sees the
//! same sessions), `queries` (the queries file), `row` (one recorded query attempt and its
//! CSV form), `session` (one session's thread), `run` (the driver: arrivals, the session
//! cap, progress, the CSV), `summary` (pure per-phase statistics), `report` (Markdown, CSV
//! and PNG of those statistics).

pub mod classes;
pub mod queries;
pub mod report;
pub mod row;
pub mod run;
pub mod schedule;
pub mod session;
pub mod summary;

#[cfg(test)]
mod tests;
