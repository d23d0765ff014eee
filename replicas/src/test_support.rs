//! Helpers for the unit tests of this crate, the console and the metrics (the `testing`
//! feature): routers over the paper's layout and admission driven without a control thread.

use std::net::SocketAddr;
use std::sync::Arc;

use pgtier_core::config::{PlbSettings, Routing};
use pgtier_policy::{PlbParams, ServiceClass};

use crate::admission_error::AdmissionError;
use crate::health::HealthConfig;
use crate::lease::SessionLease;
use crate::mailbox::ReplyMailbox;
use crate::router::{Admission, ReplicaRouter};
use crate::router_config::RouterConfig;

/// The PLB settings of 000 §IV-B with a small `theta` so tests reach saturation quickly:
/// replicas 0,1 premium, 2,3 freemium, 4 mixed.
pub fn paper_settings(theta: u32) -> PlbSettings {
    PlbSettings {
        premium: vec![0, 1],
        freemium: vec![2, 3],
        params: PlbParams::PAPER
            .with_theta(ServiceClass::Premium, theta)
            .with_theta(ServiceClass::Freemium, theta),
        load_signal: Default::default(),
        recovery_drain: false,
        tiers: None,
    }
}

/// Five made-up loopback addresses (nothing listens; these tests never connect).
pub fn addresses(count: u16) -> Vec<SocketAddr> {
    (0..count)
        .map(|i| SocketAddr::from(([127, 0, 0, 1], 1 + i)))
        .collect()
}

/// A router over `routing` for five replicas.
pub fn router(routing: Routing) -> Arc<ReplicaRouter> {
    ReplicaRouter::new(RouterConfig {
        name: "analytics".to_string(),
        replicas: addresses(5),
        routing,
        role_events_capacity: 1024,
        control_queue_capacity: 64,
        claim_attempts: 4,
        probe_login: None,
    })
    .expect("router")
}

/// A PLB router over the paper layout with `theta`.
pub fn paper_router(theta: u32) -> Arc<ReplicaRouter> {
    router(Routing::Plb(paper_settings(theta)))
}

/// Admits a session, running the control step on this thread when the decision needs it.
pub fn admit_now(
    router: &Arc<ReplicaRouter>,
    class: ServiceClass,
) -> Result<SessionLease, AdmissionError> {
    let mailbox = ReplyMailbox::new(|| {});
    match router.admit_session(class, &mailbox, 7) {
        Admission::Placed(lease) => Ok(lease),
        Admission::Refused(error) => Err(error),
        Admission::Pending => {
            router.run_control_step(&HealthConfig::default(), false);
            let reply = mailbox.poll_reply().expect("the control step answers");
            assert_eq!(reply.request_id, 7);
            reply.result
        }
    }
}
