//! Which IP addresses a connection made for a tenant may reach: the denied
//! ranges, and the CIDRs an operator opens among them. One address checker
//! for every outbound path (task egress here, channel pushes in
//! `runtime::hosts`).
//!
//! Invariants:
//! - an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`) or
//!   NAT64 (`64:ff9b::/96`) IPv6 address is judged as the IPv4 address it
//!   stands for, so no IPv6 spelling reaches a denied IPv4 range;
//! - [`denied_range`] names the range an address falls in, so a denial says why.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IPv4 address an IPv4-mapped, IPv4-compatible or NAT64 IPv6 address stands for.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return IpAddr::V4(v4);
            }
            let s = v6.segments();
            let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
            // 64:ff9b::/96, the well-known NAT64 prefix (RFC 6052).
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return IpAddr::V4(low);
            }
            // ::a.b.c.d (deprecated IPv4-compatible), but not :: and ::1.
            if s[..6] == [0; 6] && u32::from(low) > 1 {
                return IpAddr::V4(low);
            }
            ip
        }
        v4 => v4,
    }
}

pub fn is_loopback(ip: IpAddr) -> bool {
    canonical(ip).is_loopback()
}

/// RFC 1918, link-local (the metadata address 169.254.169.254 included),
/// 100.64.0.0/10; IPv6 unique-local and link-local.
pub fn is_private(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_private()
                || v4.is_link_local()
                // 100.64.0.0/10 (carrier-grade NAT)
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            // fc00::/7 unique local, fe80::/10 link-local
            (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
        }
    }
}

/// The denied range `ip` falls in, or `None` for an address on the internet.
pub fn denied_range(ip: IpAddr) -> Option<&'static str> {
    let c = canonical(ip);
    if is_loopback(c) {
        return Some("loopback");
    }
    match c {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_link_local() {
                Some("link-local (169.254.0.0/16, the metadata address included)")
            } else if v4.is_private() {
                Some("private (RFC 1918)")
            } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
                Some("carrier-grade NAT (100.64.0.0/10)")
            } else if o[0] == 0 {
                Some("this network (0.0.0.0/8)")
            } else if v4.is_multicast() {
                Some("multicast")
            } else if v4.is_broadcast() || o[0] >= 240 {
                Some("reserved (240.0.0.0/4)")
            } else if v4.is_documentation() {
                Some("documentation")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => v6_denied(v6),
    }
}

fn v6_denied(v6: Ipv6Addr) -> Option<&'static str> {
    let first = v6.segments()[0];
    if v6.is_unspecified() {
        Some("unspecified")
    } else if v6.is_multicast() {
        Some("multicast")
    } else if (first & 0xfe00) == 0xfc00 {
        Some("unique local (fc00::/7)")
    } else if (first & 0xffc0) == 0xfe80 {
        Some("link-local (fe80::/10)")
    } else {
        None
    }
}

/// Neither loopback nor private nor anything special: reachable on the internet.
pub fn is_public(ip: IpAddr) -> bool {
    denied_range(ip).is_none()
}

/// An IP network: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub net: IpAddr,
    pub bits: u8,
}

impl Cidr {
    /// `10.0.0.0/8`, `fd00::/8`, or a bare address (all its bits).
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let s = s.trim();
        let (ip, bits) = s.split_once('/').unwrap_or((s, ""));
        let net: IpAddr = ip
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|_| format!("`{s}` is not a CIDR (e.g. 10.0.0.0/8)"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = if bits.is_empty() {
            max
        } else {
            bits.parse()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length must be 0 to {max}"))?
        };
        Ok(Cidr { net, bits })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        in_cidr(ip, self.net, self.bits)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

pub fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (canonical(ip), canonical(net)) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits.min(32)))
            };
            (u32::from(a) & mask) == (u32::from(n) & mask)
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits.min(128)))
            };
            (u128::from(a) & mask) == (u128::from(n) & mask)
        }
        _ => false,
    }
}

/// Why a connection to `ip` is refused, or `None` when it may be made: a
/// denied range is refused unless one of `allowed` (the operator's CIDRs) holds it.
pub fn check(ip: IpAddr, allowed: &[Cidr]) -> Option<String> {
    let range = denied_range(ip)?;
    if allowed.iter().any(|c| c.contains(ip)) {
        return None;
    }
    Some(format!(
        "address denied: {ip} is {range} (sutra.egress.allowed-cidrs does not open it)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_internal_spelling_is_denied() {
        for internal in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(check(ip(internal), &[]).is_some(), "{internal}");
        }
        for public in [
            "93.184.216.34",
            "2606:2800:220:1:248:1893:25c8:1946",
            "64:ff9b::5db8:d822",
        ] {
            assert_eq!(check(ip(public), &[]), None, "{public}");
        }
    }

    #[test]
    fn an_operator_cidr_opens_its_range_only() {
        let allowed = [Cidr::parse("127.0.0.1/32").unwrap()];
        assert_eq!(check(ip("127.0.0.1"), &allowed), None);
        assert_eq!(check(ip("::ffff:127.0.0.1"), &allowed), None);
        assert!(check(ip("127.0.0.2"), &allowed).is_some());
        assert!(check(ip("169.254.169.254"), &allowed)
            .unwrap()
            .contains("link-local"));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nope").is_err());
        assert_eq!(Cidr::parse("::1").unwrap().bits, 128);
    }
}
