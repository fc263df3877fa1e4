//! Who may call what: host patterns, a tenant's grant for one task module,
//! the operator's ceiling, and the effective policy (their intersection).
//!
//! Invariants:
//! - a pattern is `scheme://host[:port]`, the host exact (a name or an IP
//!   literal) or `*.domain` (its sub-domains, not the domain itself); the
//!   port defaults to the scheme's; nothing else parses;
//! - a request is allowed only when a grant rule AND a ceiling pattern both
//!   match its scheme, host and port, and the rule allows its method: an
//!   empty grant allows nothing;
//! - a grant is checked against the ceiling when it is set (a rule the
//!   ceiling cannot cover is refused) and again at every request (the
//!   ceiling may have shrunk since).

use serde::{Deserialize, Serialize};

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Exact(String),
    Suffix(String),
}

/// `scheme://host[:port]`, the host exact or `*.domain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    scheme: Scheme,
    host: HostMatch,
    port: u16,
    text: String,
}

fn host_label_ok(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

fn host_name_ok(h: &str) -> bool {
    h.len() <= 253 && h.split('.').all(host_label_ok)
}

/// The host of a request, lowercased, without a trailing dot or IPv6 brackets.
pub fn normal_host(host: &str) -> String {
    host.trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

impl HostPattern {
    pub fn parse(s: &str) -> Result<HostPattern, String> {
        let text = s.trim();
        let (scheme, rest) = text.split_once("://").ok_or_else(|| {
            format!("`{text}` is not scheme://host[:port] (e.g. https://api.example.com)")
        })?;
        let scheme = Scheme::parse(scheme)
            .ok_or_else(|| format!("`{text}`: the scheme must be http or https"))?;
        if rest.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "`{text}`: a host pattern has no path, query or credentials"
            ));
        }
        // `[v6]:port`, `host:port`, `host`.
        let (host, port) = if let Some(r) = rest.strip_prefix('[') {
            let (h, after) = r
                .split_once(']')
                .ok_or_else(|| format!("`{text}`: an unclosed IPv6 bracket"))?;
            (h, after.strip_prefix(':'))
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            }
        };
        let port = match port {
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("`{text}`: `{p}` is not a port"))?,
            None => scheme.default_port(),
        };
        let host = host.to_ascii_lowercase();
        let host = if let Some(domain) = host.strip_prefix("*.") {
            if !host_name_ok(domain) {
                return Err(format!("`{text}`: `*.{domain}` is not a domain pattern"));
            }
            HostMatch::Suffix(domain.to_string())
        } else if host.parse::<std::net::IpAddr>().is_ok() || host_name_ok(&host) {
            HostMatch::Exact(normal_host(&host))
        } else {
            return Err(format!(
                "`{text}`: `{host}` is neither a host name, an IP address nor *.domain"
            ));
        };
        Ok(HostPattern {
            scheme,
            host,
            port,
            text: text.to_string(),
        })
    }

    /// Whether a request to `scheme://host:port` matches.
    pub fn matches(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        if scheme != self.scheme || port != self.port {
            return false;
        }
        let host = normal_host(host);
        match &self.host {
            HostMatch::Exact(h) => *h == host,
            HostMatch::Suffix(d) => host.len() > d.len() + 1 && host.ends_with(&format!(".{d}")),
        }
    }

    /// Whether every request this pattern matches is also matched by `other`.
    fn within(&self, other: &HostPattern) -> bool {
        if self.scheme != other.scheme || self.port != other.port {
            return false;
        }
        match (&self.host, &other.host) {
            (HostMatch::Exact(h), _) => other.matches(self.scheme, h, self.port),
            (HostMatch::Suffix(a), HostMatch::Suffix(b)) => a == b || a.ends_with(&format!(".{b}")),
            (HostMatch::Suffix(_), HostMatch::Exact(_)) => false,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// One rule of a grant, as the API takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GrantRule {
    /// `scheme://host[:port]`, the host exact or `*.domain`.
    pub host: String,
    /// The methods allowed (upper case); empty or absent: any method.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// The secrets whose `{{secret:NAME}}` placeholders the host substitutes
    /// on requests this rule matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
}

/// A tenant's grant for one task module: what its attempts may call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub allow: Vec<GrantRule>,
}

/// The most rules one grant holds.
pub const MAX_RULES: usize = 64;

/// A secret's name: 1 to 64 of `[A-Za-z0-9_.-]`.
pub fn valid_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[derive(Debug, Clone)]
struct Rule {
    host: HostPattern,
    methods: Vec<String>,
    secrets: Vec<String>,
}

/// The operator's ceiling: the patterns any grant may use (`*`: any).
#[derive(Debug, Clone, Default)]
pub struct Ceiling {
    any: bool,
    patterns: Vec<HostPattern>,
}

impl Ceiling {
    pub fn new(entries: &[String]) -> Result<Ceiling, String> {
        let mut c = Ceiling::default();
        for e in entries {
            if e.trim() == "*" {
                c.any = true;
            } else {
                c.patterns.push(HostPattern::parse(e)?);
            }
        }
        Ok(c)
    }

    fn covers(&self, p: &HostPattern) -> bool {
        self.any || self.patterns.iter().any(|c| p.within(c))
    }

    fn matches(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        self.any || self.patterns.iter().any(|c| c.matches(scheme, host, port))
    }
}

/// A grant checked and parsed, intersected with the ceiling at each request.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
    ceiling: Ceiling,
}

/// What a request matched: the secrets it may carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    pub secrets: Vec<String>,
}

impl Grant {
    /// Any method to each of `patterns`, no secret (`--allow-host`).
    pub fn allowing(patterns: &[String]) -> Grant {
        Grant {
            allow: patterns
                .iter()
                .map(|h| GrantRule {
                    host: h.clone(),
                    methods: Vec::new(),
                    secrets: Vec::new(),
                })
                .collect(),
        }
    }

    /// Check the grant (patterns, methods, secret names, and that the
    /// ceiling covers every rule): the first problem is the error.
    pub fn check(&self, ceiling: &Ceiling) -> Result<(), String> {
        if self.allow.len() > MAX_RULES {
            return Err(format!("a grant holds at most {MAX_RULES} rules"));
        }
        for r in &self.allow {
            let p = HostPattern::parse(&r.host)?;
            if !ceiling.covers(&p) {
                return Err(format!(
                    "`{}` is outside what the operator lets tasks call (sutra.egress.allowed-hosts)",
                    r.host
                ));
            }
            if let Some(m) = r.methods.iter().find(|m| {
                m.is_empty() || m.len() > 16 || !m.bytes().all(|b| b.is_ascii_uppercase())
            }) {
                return Err(format!(
                    "`{m}` is not an HTTP method (upper case, e.g. GET)"
                ));
            }
            if let Some(s) = r.secrets.iter().find(|s| !valid_secret_name(s)) {
                return Err(format!(
                    "`{s}` is not a secret name (1 to 64 of letters, digits, `_`, `-`, `.`)"
                ));
            }
        }
        Ok(())
    }

    /// The effective policy of this grant under `ceiling`. Rules that no
    /// longer parse or that the ceiling no longer covers allow nothing.
    pub fn policy(&self, ceiling: &Ceiling) -> Policy {
        Policy {
            rules: self
                .allow
                .iter()
                .filter_map(|r| {
                    let host = HostPattern::parse(&r.host).ok()?;
                    ceiling.covers(&host).then(|| Rule {
                        host,
                        methods: r.methods.clone(),
                        secrets: r.secrets.clone(),
                    })
                })
                .collect(),
            ceiling: ceiling.clone(),
        }
    }

    /// Every secret some rule names.
    pub fn secret_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.allow.iter().flat_map(|r| r.secrets.clone()).collect();
        names.sort();
        names.dedup();
        names
    }
}

impl Policy {
    /// Whether this policy can allow anything at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Judge a request's method and target: what it may carry, or why not.
    pub fn decide(
        &self,
        method: &str,
        scheme: Scheme,
        host: &str,
        port: u16,
    ) -> Result<Allowed, String> {
        let target = format!("{}://{}:{port}", scheme.as_str(), normal_host(host));
        if !self.ceiling.matches(scheme, host, port) {
            return Err(format!(
                "host not granted: {target} is outside sutra.egress.allowed-hosts"
            ));
        }
        let mut host_matched = false;
        let mut secrets = Vec::new();
        let mut any = false;
        for r in &self.rules {
            if !r.host.matches(scheme, host, port) {
                continue;
            }
            host_matched = true;
            if r.methods.is_empty() || r.methods.iter().any(|m| m == method) {
                any = true;
                secrets.extend(r.secrets.iter().cloned());
            }
        }
        if !host_matched {
            return Err(format!(
                "host not granted: {target} matches no rule of the module's grant"
            ));
        }
        if !any {
            return Err(format!("method not granted: {method} to {target}"));
        }
        secrets.sort();
        secrets.dedup();
        Ok(Allowed { secrets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(rules: &[(&str, &[&str], &[&str])]) -> Grant {
        Grant {
            allow: rules
                .iter()
                .map(|(h, m, s)| GrantRule {
                    host: h.to_string(),
                    methods: m.iter().map(|x| x.to_string()).collect(),
                    secrets: s.iter().map(|x| x.to_string()).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn patterns_parse_and_match() {
        let p = HostPattern::parse("https://api.example.com").unwrap();
        assert!(p.matches(Scheme::Https, "API.example.com.", 443));
        assert!(!p.matches(Scheme::Http, "api.example.com", 443));
        assert!(!p.matches(Scheme::Https, "api.example.com", 8443));
        let s = HostPattern::parse("https://*.example.com:8443").unwrap();
        assert!(s.matches(Scheme::Https, "a.b.example.com", 8443));
        assert!(!s.matches(Scheme::Https, "example.com", 8443));
        assert!(!s.matches(Scheme::Https, "evilexample.com", 8443));
        let ip = HostPattern::parse("http://127.0.0.1:8080").unwrap();
        assert!(ip.matches(Scheme::Http, "127.0.0.1", 8080));
        assert!(HostPattern::parse("http://[::1]:8080").unwrap().matches(
            Scheme::Http,
            "[::1]",
            8080
        ));
        for bad in [
            "api.example.com",
            "ftp://x.com",
            "https://x.com/path",
            "https://u@x.com",
            "https://x.com:0",
            "https://x.com:99999",
            "https://*.",
            "https://a..b",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_policy_is_the_intersection() {
        let ceiling = Ceiling::new(&["https://*.example.com".into()]).unwrap();
        let g = grant(&[("https://api.example.com", &["POST"], &["stripe"])]);
        g.check(&ceiling).unwrap();
        let p = g.policy(&ceiling);
        assert_eq!(
            p.decide("POST", Scheme::Https, "api.example.com", 443)
                .unwrap()
                .secrets,
            vec!["stripe".to_string()]
        );
        assert!(p
            .decide("GET", Scheme::Https, "api.example.com", 443)
            .unwrap_err()
            .contains("method"));
        assert!(p
            .decide("POST", Scheme::Https, "other.example.com", 443)
            .unwrap_err()
            .contains("host not granted"));
        // Outside the ceiling: refused when set, and allows nothing if the ceiling shrank.
        let wide = grant(&[("https://api.other.org", &[], &[])]);
        assert!(wide
            .check(&ceiling)
            .unwrap_err()
            .contains("sutra.egress.allowed-hosts"));
        assert!(wide.policy(&ceiling).is_empty());
        assert!(Grant::default()
            .policy(&Ceiling::new(&["*".into()]).unwrap())
            .decide("GET", Scheme::Https, "x.com", 443)
            .is_err());
    }

    #[test]
    fn bad_grants_are_refused() {
        let any = Ceiling::new(&["*".into()]).unwrap();
        assert!(grant(&[("https://x.com", &["get"], &[])])
            .check(&any)
            .is_err());
        assert!(grant(&[("https://x.com", &[], &["a b"])])
            .check(&any)
            .is_err());
        assert!(grant(&[("x.com", &[], &[])]).check(&any).is_err());
        let json = r#"{"allow":[{"host":"https://x.com","extra":1}]}"#;
        assert!(serde_json::from_str::<Grant>(json).is_err());
    }
}
