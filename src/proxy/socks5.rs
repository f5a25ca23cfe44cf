//! SOCKS5 (RFC 1928) with username/password authentication (RFC 1929),
//! sans-IO: each message to send, and the check of each fixed-size answer.

use std::net::IpAddr;

use super::config::Credentials;
use crate::error::{ConnectError, Result};

const VERSION: u8 = 5;
const NO_AUTH: u8 = 0x00;
const USERNAME_PASSWORD: u8 = 0x02;
const NO_ACCEPTABLE: u8 = 0xFF;
const CMD_CONNECT: u8 = 1;
const ATYP_IPV4: u8 = 1;
const ATYP_DOMAIN: u8 = 3;
const ATYP_IPV6: u8 = 4;

/// The authentication method the proxy picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    None,
    UsernamePassword,
}

/// The method-selection message: no authentication, plus username/password
/// when we have credentials.
pub(crate) fn greeting(with_auth: bool) -> Vec<u8> {
    if with_auth {
        vec![VERSION, 2, NO_AUTH, USERNAME_PASSWORD]
    } else {
        vec![VERSION, 1, NO_AUTH]
    }
}

/// Checks the proxy's method selection against what was offered.
pub(crate) fn chosen_method(reply: [u8; 2], offered_auth: bool) -> Result<Method> {
    match reply {
        [VERSION, NO_AUTH] => Ok(Method::None),
        [VERSION, USERNAME_PASSWORD] if offered_auth => Ok(Method::UsernamePassword),
        [VERSION, NO_ACCEPTABLE] => Err(ConnectError::SocksNoAcceptableAuth.into()),
        [VERSION, _] => Err(ConnectError::ProxyProtocol(
            "the SOCKS5 proxy picked a method that was not offered",
        )
        .into()),
        _ => Err(ConnectError::ProxyProtocol("not a SOCKS5 proxy").into()),
    }
}

/// The RFC 1929 request. Lengths were checked by `Proxy::validate`; checked
/// again here so that no length byte can wrap.
pub(crate) fn auth_request(c: &Credentials) -> Result<Vec<u8>> {
    let (user, pass) = (c.username.as_bytes(), c.password.as_bytes());
    let (Ok(ulen), Ok(plen)) = (u8::try_from(user.len()), u8::try_from(pass.len())) else {
        return Err(crate::Error::InvalidConfig(
            "SOCKS5 usernames and passwords are 1 to 255 bytes",
        ));
    };
    let mut out = Vec::with_capacity(3 + user.len() + pass.len());
    out.extend_from_slice(&[1, ulen]);
    out.extend_from_slice(user);
    out.push(plen);
    out.extend_from_slice(pass);
    Ok(out)
}

/// Checks the RFC 1929 answer: status 0 is success.
pub(crate) fn auth_status(reply: [u8; 2]) -> Result<()> {
    match reply {
        // RFC 1929 says version 1; some proxies answer 5.
        [1 | VERSION, 0] => Ok(()),
        [1 | VERSION, _] => Err(ConnectError::SocksAuthFailed.into()),
        _ => Err(ConnectError::ProxyProtocol("malformed SOCKS5 authentication answer").into()),
    }
}

/// The CONNECT request. A host name is sent as a name (ATYP 3) so that the
/// proxy resolves it; IP literals go as addresses.
pub(crate) fn connect_request(host: &str, port: u16) -> Result<Vec<u8>> {
    let mut out = vec![VERSION, CMD_CONNECT, 0];
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            out.push(ATYP_IPV4);
            out.extend_from_slice(&ip.octets());
        }
        Ok(IpAddr::V6(ip)) => {
            out.push(ATYP_IPV6);
            out.extend_from_slice(&ip.octets());
        }
        Err(_) => {
            let len = u8::try_from(host.len())
                .ok()
                .filter(|&n| n > 0)
                .ok_or(ConnectError::SocksHostName(host.len()))?;
            out.extend_from_slice(&[ATYP_DOMAIN, len]);
            out.extend_from_slice(host.as_bytes());
        }
    }
    out.extend_from_slice(&port.to_be_bytes());
    Ok(out)
}

/// Checks the first four bytes of the proxy's answer to CONNECT (version,
/// reply code, reserved, address type). Returns how many bytes of bound
/// address and port follow, or `None` for a domain name, whose length is
/// the next byte (then the name and two port bytes follow).
pub(crate) fn reply_head(head: [u8; 4]) -> Result<Option<usize>> {
    let [version, reply, _reserved, atyp] = head;
    if version != VERSION {
        return Err(ConnectError::ProxyProtocol("not a SOCKS5 answer").into());
    }
    if reply != 0 {
        return Err(ConnectError::SocksRefused(reply).into());
    }
    match atyp {
        ATYP_IPV4 => Ok(Some(4 + 2)),
        ATYP_IPV6 => Ok(Some(16 + 2)),
        ATYP_DOMAIN => Ok(None),
        _ => Err(ConnectError::ProxyProtocol("unknown address type in the SOCKS5 answer").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn greeting_offers_auth_only_with_credentials() {
        assert_eq!(greeting(false), [5, 1, 0]);
        assert_eq!(greeting(true), [5, 2, 0, 2]);
    }

    #[test]
    fn method_selection() {
        assert_eq!(chosen_method([5, 0], false).unwrap(), Method::None);
        assert_eq!(chosen_method([5, 0], true).unwrap(), Method::None);
        assert_eq!(
            chosen_method([5, 2], true).unwrap(),
            Method::UsernamePassword
        );
        assert!(matches!(
            chosen_method([5, 0xFF], false),
            Err(Error::Connect(ConnectError::SocksNoAcceptableAuth))
        ));
        // A method we did not offer, or an answer from something else.
        for reply in [[5, 2], [5, 1], [4, 0], [b'H', b'T']] {
            assert!(matches!(
                chosen_method(reply, false),
                Err(Error::Connect(ConnectError::ProxyProtocol(_)))
            ));
        }
    }

    #[test]
    fn auth_request_and_status() {
        let c = Credentials {
            username: "user".into(),
            password: "pw".into(),
        };
        assert_eq!(auth_request(&c).unwrap(), b"\x01\x04user\x02pw");
        let too_long = Credentials {
            username: "u".repeat(256),
            password: "p".into(),
        };
        assert!(auth_request(&too_long).is_err());
        assert!(auth_status([1, 0]).is_ok());
        assert!(matches!(
            auth_status([1, 1]),
            Err(Error::Connect(ConnectError::SocksAuthFailed))
        ));
        assert!(matches!(
            auth_status([9, 0]),
            Err(Error::Connect(ConnectError::ProxyProtocol(_)))
        ));
    }

    #[test]
    fn connect_request_lets_the_proxy_resolve_names() {
        assert_eq!(
            connect_request("example.com", 443).unwrap(),
            b"\x05\x01\x00\x03\x0bexample.com\x01\xbb"
        );
        assert_eq!(
            connect_request("10.1.2.3", 80).unwrap(),
            [5, 1, 0, 1, 10, 1, 2, 3, 0, 80]
        );
        let v6 = connect_request("::1", 80).unwrap();
        assert_eq!(&v6[..4], [5, 1, 0, 4]);
        assert_eq!(v6.len(), 4 + 16 + 2);
        assert!(matches!(
            connect_request(&"a".repeat(256), 80),
            Err(Error::Connect(ConnectError::SocksHostName(256)))
        ));
    }

    #[test]
    fn reply_codes() {
        assert_eq!(reply_head([5, 0, 0, 1]).unwrap(), Some(6));
        assert_eq!(reply_head([5, 0, 0, 4]).unwrap(), Some(18));
        assert_eq!(reply_head([5, 0, 0, 3]).unwrap(), None);
        for code in 1..=8 {
            assert!(matches!(
                reply_head([5, code, 0, 1]),
                Err(Error::Connect(ConnectError::SocksRefused(c))) if c == code
            ));
        }
        assert!(reply_head([5, 0, 0, 9]).is_err());
        assert!(reply_head([4, 0x5A, 0, 0]).is_err());
    }
}
