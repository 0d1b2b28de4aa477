//! Who may open an association: the called AE title must be ours (unless that check is off),
//! and when an allow-list is given, the calling AE title or the peer's address must be on it.

use std::net::IpAddr;

use dicom_ul::pdu::AssociationRJServiceUserReason;

/// One allow-list entry: an address, a network (`10.1.0.0/16`), or a calling AE title.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowRule {
    /// Peers in `addr/prefix` (a single address has the full prefix).
    Network { addr: IpAddr, prefix: u8 },
    /// A calling AE title (compared exactly, after trimming spaces).
    AeTitle(String),
}

impl std::fmt::Display for AllowRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllowRule::Network { addr, prefix } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                if *prefix == full {
                    write!(f, "{addr}")
                } else {
                    write!(f, "{addr}/{prefix}")
                }
            }
            AllowRule::AeTitle(t) => f.write_str(t),
        }
    }
}

impl serde::Serialize for AllowRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl std::str::FromStr for AllowRule {
    type Err = String;

    /// `10.0.0.7`, `10.0.0.0/8`, `::1`, `fd00::/8`, or an AE title (1–16 characters, no
    /// backslash or control characters).
    fn from_str(s: &str) -> Result<AllowRule, String> {
        let s = s.trim();
        let (host, prefix) = match s.split_once('/') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        if let Ok(addr) = host.parse::<IpAddr>() {
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                None => max,
                Some(p) => p
                    .parse::<u8>()
                    .ok()
                    .filter(|&p| p <= max)
                    .ok_or_else(|| format!("`{s}`: the prefix must be 0..={max}"))?,
            };
            return Ok(AllowRule::Network { addr, prefix });
        }
        check_ae_title(s)
            .map_err(|e| format!("`{s}` is neither an address nor an AE title: {e}"))?;
        Ok(AllowRule::AeTitle(s.to_string()))
    }
}

/// An AE title: 1–16 characters of the default repertoire, no backslash or control characters,
/// not only spaces (PS3.5 §6.2, AE).
pub fn check_ae_title(s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err("an AE title must not be empty".into());
    }
    if s.len() > 16 {
        return Err("an AE title has at most 16 characters".into());
    }
    if !s.chars().all(|c| c.is_ascii_graphic() || c == ' ') || s.contains('\\') {
        return Err("an AE title holds printable ASCII characters other than `\\`".into());
    }
    Ok(())
}

fn in_network(peer: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let to_bits = |ip: IpAddr| -> (u128, u8) {
        match ip {
            IpAddr::V4(v4) => (u32::from(v4) as u128, 32),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => (u32::from(v4) as u128, 32),
                None => (u128::from(v6), 128),
            },
        }
    };
    let (p, pw) = to_bits(peer);
    let (n, nw) = to_bits(net);
    if pw != nw {
        return false;
    }
    let shift = u32::from(nw - prefix.min(nw));
    if shift >= 128 {
        return true;
    }
    (p >> shift) == (n >> shift)
}

/// The access decision for one connection: ours to make once the calling AE title is known.
#[derive(Debug, Clone)]
pub struct Access<'a> {
    pub check_called: bool,
    pub allow: &'a [AllowRule],
    pub peer: IpAddr,
}

impl Access<'_> {
    /// True when the peer's address alone is on the allow-list (or there is none).
    fn address_allowed(&self) -> bool {
        self.allow.iter().any(|r| match r {
            AllowRule::Network { addr, prefix } => in_network(self.peer, *addr, *prefix),
            AllowRule::AeTitle(_) => false,
        })
    }

    fn ae_allowed(&self, calling: &str) -> bool {
        self.allow
            .iter()
            .any(|r| matches!(r, AllowRule::AeTitle(t) if t == calling.trim()))
    }

    /// Why an association from `calling` to `called` is refused (None: accepted).
    pub fn refusal(
        &self,
        this_ae: &str,
        calling: &str,
        called: &str,
    ) -> Option<(AssociationRJServiceUserReason, String)> {
        if self.check_called && called.trim() != this_ae.trim() {
            return Some((
                AssociationRJServiceUserReason::CalledAETitleNotRecognized,
                format!(
                    "called AE title `{}` is not ours (`{}`)",
                    called.trim(),
                    this_ae.trim()
                ),
            ));
        }
        if !self.allow.is_empty() && !self.address_allowed() && !self.ae_allowed(calling) {
            return Some((
                AssociationRJServiceUserReason::CallingAETitleNotRecognized,
                format!(
                    "neither calling AE title `{}` nor address {} is on listen.allow",
                    calling.trim(),
                    self.peer
                ),
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> Vec<AllowRule> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn rules_parse_addresses_networks_and_ae_titles() {
        assert_eq!(
            "10.0.0.0/8".parse::<AllowRule>().unwrap(),
            AllowRule::Network {
                addr: "10.0.0.0".parse().unwrap(),
                prefix: 8
            }
        );
        assert_eq!(
            "::1".parse::<AllowRule>().unwrap(),
            AllowRule::Network {
                addr: "::1".parse().unwrap(),
                prefix: 128
            }
        );
        assert_eq!(
            "CT_SCANNER".parse::<AllowRule>().unwrap(),
            AllowRule::AeTitle("CT_SCANNER".into())
        );
        assert!("10.0.0.0/33".parse::<AllowRule>().is_err());
        assert!("A\\B".parse::<AllowRule>().is_err());
        assert!("SEVENTEEN_LETTERS".parse::<AllowRule>().is_err());
        assert!("".parse::<AllowRule>().is_err());
    }

    #[test]
    fn called_title_then_allow_list() {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let open = Access {
            check_called: true,
            allow: &[],
            peer: local,
        };
        assert!(open.refusal("DICOMFLOW", "ANY", "DICOMFLOW").is_none());
        let (reason, why) = open.refusal("DICOMFLOW", "ANY", "OTHER").unwrap();
        assert_eq!(
            reason,
            AssociationRJServiceUserReason::CalledAETitleNotRecognized
        );
        assert!(why.contains("OTHER"), "{why}");
        let unchecked = Access {
            check_called: false,
            ..open.clone()
        };
        assert!(unchecked.refusal("DICOMFLOW", "ANY", "OTHER").is_none());

        let list = rules(&["PACS", "192.168.1.0/24"]);
        let from = |ip: &str| Access {
            check_called: true,
            allow: &list,
            peer: ip.parse().unwrap(),
        };
        assert!(from("192.168.1.77").refusal("D", "ANY", "D").is_none());
        assert!(from("::ffff:192.168.1.77")
            .refusal("D", "ANY", "D")
            .is_none());
        assert!(from("10.0.0.1").refusal("D", "PACS", "D").is_none());
        let (reason, _) = from("10.0.0.1").refusal("D", "ANY", "D").unwrap();
        assert_eq!(
            reason,
            AssociationRJServiceUserReason::CallingAETitleNotRecognized
        );
        assert!(in_network(local, "0.0.0.0".parse().unwrap(), 0));
        assert!(!in_network(local, "::1".parse().unwrap(), 128));
    }
}
