//! Several proxies in front of the same replicas (issue 27 item 2): the load balancer spreads
//! clients over N proxies round robin, and the proxies either run PLB each on its own share
//! (`independent`, with θ unchanged or split by N) or share one load view and one role
//! table through a store (`leader`: the design pgtier builds; `shared`: the forwarding
//! alternative). `experiment` compares them with one big proxy on the same arrivals, session
//! by session through `recorder`.

pub mod experiment;
pub mod independent;
pub mod leader;
pub mod recorder;
pub mod shared;

#[cfg(test)]
mod tests;
