//! The SSRF guard: which addresses and URLs a tool may reach.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

use crate::Refused;

/// Why an address may not be reached, or `None` when it may.
pub fn refused_ip(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => "an unspecified (0.0.0.0/8) address",
        (10, ..) => "a private (10.0.0.0/8) address",
        (100, 64..=127, _) => "a shared CGNAT (100.64.0.0/10) address",
        (127, ..) => "a loopback address",
        (169, 254, _) => "a link-local address (cloud metadata lives at 169.254.169.254)",
        (172, 16..=31, _) => "a private (172.16.0.0/12) address",
        (192, 0, 0) => "an IETF protocol (192.0.0.0/24) address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (192, 168, _) => "a private (192.168.0.0/16) address",
        (198, 18..=19, _) => "a benchmarking (198.18.0.0/15) address",
        (224..=239, ..) => "a multicast address",
        (240..=255, ..) => "a reserved or broadcast address",
        _ => return None,
    })
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    // Forms that carry an IPv4 address are judged by that address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return refused_v4(v4).map(|_| "an IPv4-mapped form of a refused IPv4 address");
    }
    let s = ip.segments();
    if s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_loopback() && !ip.is_unspecified() {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        return refused_v4(v4).map(|_| "an IPv4-compatible form of a refused IPv4 address");
    }
    if s[0] == 0x64 && s[1] == 0xff9b {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        return refused_v4(v4).map(|_| "a NAT64 form of a refused IPv4 address");
    }
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        return refused_v4(v4).map(|_| "a 6to4 form of a refused IPv4 address");
    }
    Some(match s[0] {
        _ if ip.is_unspecified() => "an unspecified address",
        _ if ip.is_loopback() => "a loopback address",
        0xfe80..=0xfebf => "a link-local address",
        0xfec0..=0xfeff => "a site-local address",
        0xfc00..=0xfdff => "a unique-local (private) address",
        0xff00..=0xffff => "a multicast address",
        0x2001 if s[1] == 0x0db8 => "a documentation address",
        0x0100 if s[1..4] == [0, 0, 0] => "a discard-only address",
        _ => return None,
    })
}

/// Checks what can be checked of `url` before any lookup: the scheme, credentials, and
/// a host that is an IP address. `allowed` says whether a host is on the allow-list.
///
/// # Errors
/// [`Refused`], naming the rule that refuses the URL.
pub fn check_url(url: &Url, allowed: &dyn Fn(&str) -> bool) -> Result<(), Refused> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Refused(format!(
            "refused `{url}`: only http and https URLs are allowed"
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refused("refused the URL: it carries credentials (user:password@); send them as a header instead".to_owned()));
    }
    let host = url
        .host()
        .ok_or_else(|| Refused(format!("refused `{url}`: it has no host")))?;
    let name = match &host {
        Host::Domain(d) => d.to_string(),
        Host::Ipv4(ip) => ip.to_string(),
        Host::Ipv6(ip) => ip.to_string(),
    };
    if allowed(&name) {
        return Ok(());
    }
    let ip = match host {
        Host::Domain(_) => return Ok(()),
        Host::Ipv4(ip) => IpAddr::V4(ip),
        Host::Ipv6(ip) => IpAddr::V6(ip),
    };
    match refused_ip(ip) {
        Some(why) => Err(Refused(format!(
            "refused `{url}`: {ip} is {why}; allow it with --allow-host {name}"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        for (ip, refused) in [
            ("8.8.8.8", false),
            ("1.1.1.1", false),
            ("127.0.0.1", true),
            ("127.255.255.254", true),
            ("10.1.2.3", true),
            ("172.16.0.1", true),
            ("172.32.0.1", false),
            ("192.168.1.1", true),
            ("169.254.169.254", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("0.0.0.0", true),
            ("224.0.0.1", true),
            ("255.255.255.255", true),
            ("::1", true),
            ("::", true),
            ("::ffff:127.0.0.1", true),
            ("::ffff:8.8.8.8", false),
            ("64:ff9b::7f00:1", true),
            ("64:ff9b::808:808", false),
            ("2002:7f00:1::", true),
            ("fe80::1", true),
            ("fd00:ec2::254", true),
            ("ff02::1", true),
            ("2001:db8::1", true),
            ("2606:4700:4700::1111", false),
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert_eq!(
                refused_ip(parsed).is_some(),
                refused,
                "{ip}: {:?}",
                refused_ip(parsed)
            );
        }
    }

    #[test]
    fn urls_and_odd_ipv4_spellings() {
        let none = |_: &str| false;
        for (raw, expect) in [
            (
                "http://2130706433/",
                "refused `http://127.0.0.1/`: 127.0.0.1 is a loopback address; allow it with --allow-host 127.0.0.1",
            ),
            (
                "http://0x7f.1/",
                "refused `http://127.0.0.1/`: 127.0.0.1 is a loopback address; allow it with --allow-host 127.0.0.1",
            ),
            (
                "http://127.1:8080/x",
                "refused `http://127.0.0.1:8080/x`: 127.0.0.1 is a loopback address; allow it with --allow-host 127.0.0.1",
            ),
            (
                "http://[::ffff:169.254.169.254]/",
                "refused `http://[::ffff:a9fe:a9fe]/`: ::ffff:169.254.169.254 is an IPv4-mapped form of a refused IPv4 address; allow it with --allow-host ::ffff:169.254.169.254",
            ),
            (
                "ftp://example.com/",
                "refused `ftp://example.com/`: only http and https URLs are allowed",
            ),
            (
                "file:///etc/passwd",
                "refused `file:///etc/passwd`: only http and https URLs are allowed",
            ),
            (
                "http://user:pw@example.com/",
                "refused the URL: it carries credentials (user:password@); send them as a header instead",
            ),
        ] {
            let url = Url::parse(raw).unwrap();
            assert_eq!(check_url(&url, &none).unwrap_err().0, expect, "{raw}");
        }
        assert!(check_url(&Url::parse("https://example.com/").unwrap(), &none).is_ok());
        let loopback_ok = |h: &str| h == "127.0.0.1";
        assert!(check_url(&Url::parse("http://127.0.0.1:9/").unwrap(), &loopback_ok).is_ok());
    }
}
