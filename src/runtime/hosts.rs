//! Outbound safety: which hosts a push URL may reach
//! (`sutra.outbox.allowed-hosts`). A tenant must not be able to make the
//! server call an arbitrary internal address.
//!
//! Entries: `*` (any host, on public addresses only), `loopback`
//! (127.0.0.0/8, ::1), `private` (RFC 1918, CGNAT, link-local, unique-local),
//! a host name (`api.example.com`, any address it resolves to), `*.domain`
//! (its sub-domains), an IP address, or a CIDR (`10.0.0.0/8`).
//!
//! Invariants:
//! - an address is allowed only if an entry allows it for that host; `*`
//!   never allows a loopback, private, link-local, unspecified, multicast or
//!   broadcast address (nor their IPv4-mapped or NAT64 spellings), so the
//!   default (`*`) reaches the public internet only;
//! - the check is made at `PUT /v1/channels/{name}` (the URL is refused) and
//!   again at every connection: the HTTP client resolves names through
//!   [`PolicyResolver`], which drops every address the policy does not
//!   allow, so a name that later resolves elsewhere (DNS rebinding) still
//!   cannot reach an internal address; redirects are never followed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    Public,
    Loopback,
    Private,
    Host(String),
    Suffix(String),
    Ip(IpAddr),
    Cidr(IpAddr, u8),
}

/// The parsed `sutra.outbox.allowed-hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPolicy {
    entries: Vec<Entry>,
}

fn host_name_ok(h: &str) -> bool {
    let labels: Vec<&str> = h.split('.').collect();
    h.len() <= 253
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
        // A top-level label is never all digits (that is an IP, or nothing).
        && labels.last().is_some_and(|l| !l.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_entry(s: &str) -> Result<Entry, String> {
    let s = s.trim().to_ascii_lowercase();
    match s.as_str() {
        "*" => return Ok(Entry::Public),
        "loopback" => return Ok(Entry::Loopback),
        "private" => return Ok(Entry::Private),
        _ => {}
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(Entry::Ip(ip));
    }
    if let Some((ip, bits)) = s.split_once('/') {
        let ip: IpAddr = ip.parse().map_err(|_| format!("`{s}`: not a CIDR"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits: u8 = bits
            .parse()
            .ok()
            .filter(|b| *b <= max)
            .ok_or_else(|| format!("`{s}`: the prefix length must be 0 to {max}"))?;
        return Ok(Entry::Cidr(ip, bits));
    }
    if let Some(domain) = s.strip_prefix("*.") {
        if host_name_ok(domain) {
            return Ok(Entry::Suffix(domain.to_string()));
        }
    } else if host_name_ok(&s) {
        return Ok(Entry::Host(s));
    }
    Err(format!("`{s}` is not an allowed-hosts entry"))
}

// The address classification is shared with task egress (`crate::egress::address`):
// one checker for every outbound path.
use crate::egress::address::{canonical, in_cidr, is_loopback, is_private, is_public};

impl HostPolicy {
    /// Parses the entries; the first bad one is the error.
    pub fn new(entries: &[String]) -> Result<HostPolicy, String> {
        Ok(HostPolicy {
            entries: entries
                .iter()
                .map(|e| parse_entry(e))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether `entry` is a valid allowed-hosts entry.
    pub fn check_entry(entry: &str) -> Result<(), String> {
        parse_entry(entry).map(|_| ())
    }

    /// Whether the host name is named by an entry (then any address it resolves to is allowed).
    fn names(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.entries.iter().any(|e| match e {
            Entry::Host(h) => *h == host,
            Entry::Suffix(d) => host.ends_with(&format!(".{d}")),
            _ => false,
        })
    }

    /// Whether a connection to `ip` for `host` is allowed.
    pub fn allows(&self, host: &str, ip: IpAddr) -> bool {
        self.names(host)
            || self.entries.iter().any(|e| match e {
                Entry::Public => is_public(ip),
                Entry::Loopback => is_loopback(ip),
                Entry::Private => is_private(ip),
                Entry::Ip(a) => canonical(*a) == canonical(ip),
                Entry::Cidr(net, bits) => in_cidr(ip, *net, *bits),
                Entry::Host(_) | Entry::Suffix(_) => false,
            })
    }

    /// Checks a push URL: `http`, a host, and at least one address of it
    /// that the policy allows (a name is resolved now; every connection
    /// checks again).
    pub async fn check_url(&self, url: &str) -> Result<(), String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        match parsed.scheme() {
            "http" => {}
            "https" => {
                return Err(
                    "https push URLs are not supported by this build (no TLS): use http, e.g. behind a local TLS proxy"
                        .into(),
                )
            }
            other => return Err(format!("a push URL must be http, not `{other}`")),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("a push URL must not carry credentials".into());
        }
        if let Some(ip) = literal_ip(&parsed) {
            return self.check_ip(ip);
        }
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("`{url}` has no host"))?
            .to_string();
        if self.names(&host) {
            return Ok(());
        }
        let port = parsed.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| format!("cannot resolve `{host}`: {e}"))?
            .collect();
        if addrs.iter().any(|a| self.allows(&host, a.ip())) {
            Ok(())
        } else {
            Err(format!(
                "`{host}` is not among the hosts the server may call (sutra.outbox.allowed-hosts)"
            ))
        }
    }

    fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        if self.allows(&ip.to_string(), ip) {
            Ok(())
        } else {
            Err(format!(
                "{ip} is not among the addresses the server may call (sutra.outbox.allowed-hosts)"
            ))
        }
    }
}

/// The HTTP client's resolver: only addresses the policy allows for the name.
pub struct PolicyResolver {
    pub policy: Arc<HostPolicy>,
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| policy.allows(&host, a.ip()))
                .collect();
            if found.is_empty() {
                return Err(format!(
                    "`{host}` resolves to no address the server may call (sutra.outbox.allowed-hosts)"
                )
                .into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

/// The IP address a URL names literally (no resolver is involved for it).
pub fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    let host = url.host_str()?;
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> HostPolicy {
        HostPolicy::new(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_default_reaches_public_addresses_only() {
        let p = policy(&["*"]);
        assert!(p.allows("example.com", ip("93.184.216.34")));
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
        ] {
            assert!(!p.allows("x.example", ip(internal)), "{internal}");
        }
    }

    #[test]
    fn loopback_private_names_and_cidrs_are_explicit() {
        assert!(policy(&["loopback"]).allows("localhost", ip("127.0.0.1")));
        assert!(policy(&["loopback"]).allows("localhost", ip("::1")));
        assert!(!policy(&["loopback"]).allows("x", ip("10.0.0.1")));
        assert!(policy(&["private"]).allows("x", ip("10.0.0.1")));
        assert!(policy(&["10.0.0.0/8"]).allows("x", ip("10.9.9.9")));
        assert!(!policy(&["10.0.0.0/8"]).allows("x", ip("11.0.0.1")));
        assert!(policy(&["internal.corp"]).allows("internal.corp", ip("10.0.0.5")));
        assert!(policy(&["*.corp"]).allows("a.internal.corp", ip("10.0.0.5")));
        assert!(!policy(&["*.corp"]).allows("corp", ip("10.0.0.5")));
        assert!(policy(&["127.0.0.1"]).allows("127.0.0.1", ip("127.0.0.1")));
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in ["0", "http://x", "10.0.0.0/33", "a..b", "-a.com", "*.", ""] {
            assert!(HostPolicy::check_entry(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn urls_are_checked() {
        let p = policy(&["*"]);
        assert!(p.check_url("http://127.0.0.1:9/x").await.is_err());
        assert!(p.check_url("ftp://example.com/").await.is_err());
        assert!(p.check_url("https://example.com/").await.is_err());
        assert!(p.check_url("http://u:p@93.184.216.34/").await.is_err());
        assert!(p.check_url("http://93.184.216.34/hook").await.is_ok());
        let l = policy(&["loopback"]);
        assert!(l.check_url("http://127.0.0.1:9/x").await.is_ok());
        assert!(l.check_url("http://[::1]:9/x").await.is_ok());
    }
}
