//! Outbound HTTP for tasks (issue 30): a service of the runtime that a
//! guest's `wasi:http` request (the sandbox's hooks) and a host-made call go
//! through alike.
//!
//! - `policy`: host patterns, a tenant's [`Grant`] per task module, the
//!   operator's [`Ceiling`]; the effective [`Policy`] is their intersection.
//! - `address`: the denied ranges (loopback, RFC 1918, link-local with the
//!   metadata address, CGNAT, 0.0.0.0/8, multicast, IPv6 loopback, ULA,
//!   link-local, and the IPv4-mapped/-compatible/NAT64 spellings) and the
//!   operator's CIDRs that open some of them; shared with the channel
//!   pushes' `runtime::hosts`.
//! - `session`: one attempt's calls: cap, policy, secrets placeholders,
//!   resolve once, check every address, connect to a checked one, no
//!   redirects, limits bounded by the attempt's deadline, the record.
//! - `calls`: the bounded per-attempt call record (stored with the attempt).
//! - `secrets`: the AEAD sealing of tenant secrets at rest, with key rotation.
//! - `tls`: rustls with the system's roots plus an operator CA file.
//!
//! Invariants: nothing here reads configuration after start; a secret's
//! value leaves this module only on the wire to a host its grant binds.

pub mod address;
pub mod calls;
pub mod policy;
pub mod secrets;
pub mod session;
pub mod tls;

pub use calls::{Call, CallLog, CallRecord};
pub use policy::{Ceiling, Grant, GrantRule, Policy};
pub use session::{Egress, Failure, Limits, Session};

use crate::config::EgressConfig;
use std::collections::HashMap;
use std::net::IpAddr;

impl Egress {
    /// The egress service of a configuration (its keys named on a bad value).
    pub fn from_config(c: &EgressConfig) -> Result<Egress, String> {
        let ceiling = Ceiling::new(&c.allowed_hosts)
            .map_err(|e| format!("sutra.egress.allowed-hosts: {e}"))?;
        let cidrs = c
            .allowed_cidrs
            .iter()
            .map(|s| address::Cidr::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("sutra.egress.allowed-cidrs: {e}"))?;
        let mut static_hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for entry in &c.static_hosts {
            let (name, ip) = entry
                .split_once('=')
                .ok_or_else(|| format!("sutra.egress.static-hosts: `{entry}` is not NAME=IP"))?;
            let ip: IpAddr = ip
                .trim()
                .parse()
                .map_err(|_| format!("sutra.egress.static-hosts: `{entry}`: not an IP address"))?;
            static_hosts
                .entry(policy::normal_host(name.trim()))
                .or_default()
                .push(ip);
        }
        let tls = tls::Tls::new(c.ca_file.as_deref().map(std::path::Path::new))
            .map_err(|e| format!("sutra.egress.ca-file: {e}"))?;
        Ok(Egress {
            ceiling,
            cidrs,
            static_hosts,
            limits: c.limits,
            tls,
        })
    }
}
