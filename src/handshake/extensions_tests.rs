use super::*;

fn headers(lines: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for l in lines {
        h.append(SEC_WEBSOCKET_EXTENSIONS, HeaderValue::from_str(l).unwrap());
    }
    h
}

fn params(snct: bool, cnct: bool, smwb: u8, cmwb: u8) -> DeflateParams {
    let mut p = DeflateParams::default();
    p.server_no_context_takeover = snct;
    p.client_no_context_takeover = cnct;
    p.server_max_window_bits = smwb;
    p.client_max_window_bits = cmwb;
    p
}

#[test]
fn server_negotiation_table() {
    let d = DeflateConfig::default();
    type Case<'a> = (
        &'a str,
        DeflateConfig,
        &'a [&'a str],
        Option<(&'a str, DeflateParams)>,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "bare offer",
            d.clone(),
            &["permessage-deflate"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
        (
            "name is case-insensitive",
            d.clone(),
            &["Permessage-Deflate"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
        (
            "server_no_context_takeover asked",
            d.clone(),
            &["permessage-deflate; server_no_context_takeover"],
            Some((
                "permessage-deflate; server_no_context_takeover",
                params(true, false, 15, 15),
            )),
        ),
        (
            "client_no_context_takeover hint is not echoed",
            d.clone(),
            &["permessage-deflate; client_no_context_takeover"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
        (
            "we ask the client to reset",
            d.clone().client_no_context_takeover(true),
            &["permessage-deflate"],
            Some((
                "permessage-deflate; client_no_context_takeover",
                params(false, true, 15, 15),
            )),
        ),
        (
            "we reset ours unasked",
            d.clone().server_no_context_takeover(true),
            &["permessage-deflate"],
            Some((
                "permessage-deflate; server_no_context_takeover",
                params(true, false, 15, 15),
            )),
        ),
        (
            "server_max_window_bits asked",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=10"],
            Some((
                "permessage-deflate; server_max_window_bits=10",
                params(false, false, 10, 15),
            )),
        ),
        (
            "server_max_window_bits=8 asked",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=8"],
            Some((
                "permessage-deflate; server_max_window_bits=8",
                params(false, false, 8, 15),
            )),
        ),
        (
            "server_max_window_bits=15 asked is answered",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=15"],
            Some((
                "permessage-deflate; server_max_window_bits=15",
                params(false, false, 15, 15),
            )),
        ),
        (
            "our smaller window is stated",
            d.clone().server_max_window_bits(Some(9)),
            &["permessage-deflate; server_max_window_bits=12"],
            Some((
                "permessage-deflate; server_max_window_bits=9",
                params(false, false, 9, 15),
            )),
        ),
        (
            "our window unasked",
            d.clone().server_max_window_bits(Some(11)),
            &["permessage-deflate"],
            Some((
                "permessage-deflate; server_max_window_bits=11",
                params(false, false, 11, 15),
            )),
        ),
        (
            "quoted value",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=\"10\""],
            Some((
                "permessage-deflate; server_max_window_bits=10",
                params(false, false, 10, 15),
            )),
        ),
        (
            "bare client_max_window_bits, no limit of ours",
            d.clone(),
            &["permessage-deflate; client_max_window_bits"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
        (
            "client states its window",
            d.clone(),
            &["permessage-deflate; client_max_window_bits=10"],
            Some((
                "permessage-deflate; client_max_window_bits=10",
                params(false, false, 15, 10),
            )),
        ),
        (
            "we limit the client's window",
            d.clone().client_max_window_bits(Some(9)),
            &["permessage-deflate; client_max_window_bits"],
            Some((
                "permessage-deflate; client_max_window_bits=9",
                params(false, false, 15, 9),
            )),
        ),
        (
            "smaller of both client limits",
            d.clone().client_max_window_bits(Some(12)),
            &["permessage-deflate; client_max_window_bits=10"],
            Some((
                "permessage-deflate; client_max_window_bits=10",
                params(false, false, 15, 10),
            )),
        ),
        (
            "we need a client limit it cannot give",
            d.clone().client_max_window_bits(Some(9)),
            &["permessage-deflate"],
            None,
        ),
        (
            "all four",
            d.clone(),
            &[
                "permessage-deflate; client_max_window_bits=9; client_no_context_takeover; server_max_window_bits=9; server_no_context_takeover",
            ],
            Some((
                "permessage-deflate; server_no_context_takeover; server_max_window_bits=9; client_max_window_bits=9",
                params(true, false, 9, 9),
            )),
        ),
        (
            "autobahn 13.3 offer",
            d.clone(),
            &[
                "permessage-deflate; client_max_window_bits; client_no_context_takeover; server_max_window_bits=9",
            ],
            Some((
                "permessage-deflate; server_max_window_bits=9",
                params(false, false, 9, 15),
            )),
        ),
        ("no offer", d.clone(), &[], None),
        (
            "other extension only",
            d.clone(),
            &["x-webkit-deflate-frame"],
            None,
        ),
        (
            "other extension first",
            d.clone(),
            &["foo; bar=1, permessage-deflate"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
        (
            "unknown parameter skips the offer",
            d.clone(),
            &["permessage-deflate; foo"],
            None,
        ),
        (
            "unknown parameter, then a good offer",
            d.clone(),
            &["permessage-deflate; foo, permessage-deflate; server_no_context_takeover"],
            Some((
                "permessage-deflate; server_no_context_takeover",
                params(true, false, 15, 15),
            )),
        ),
        (
            "several offers: first acceptable wins",
            d.clone().client_max_window_bits(Some(10)),
            &[
                "permessage-deflate; server_max_window_bits=9, permessage-deflate; client_max_window_bits, permessage-deflate",
            ],
            Some((
                "permessage-deflate; client_max_window_bits=10",
                params(false, false, 15, 10),
            )),
        ),
        (
            "offers across repeated headers",
            d.clone(),
            &[
                "permessage-deflate; bogus",
                "permessage-deflate; server_max_window_bits=12",
            ],
            Some((
                "permessage-deflate; server_max_window_bits=12",
                params(false, false, 12, 15),
            )),
        ),
        (
            "duplicate parameter",
            d.clone(),
            &["permessage-deflate; server_no_context_takeover; server_no_context_takeover"],
            None,
        ),
        (
            "duplicate window bits",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=10; server_max_window_bits=10"],
            None,
        ),
        (
            "duplicate in other case",
            d.clone(),
            &["permessage-deflate; client_max_window_bits; CLIENT_MAX_WINDOW_BITS"],
            None,
        ),
        (
            "window bits 7",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=7"],
            None,
        ),
        (
            "window bits 16",
            d.clone(),
            &["permessage-deflate; client_max_window_bits=16"],
            None,
        ),
        (
            "window bits leading zero",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=09"],
            None,
        ),
        (
            "window bits not a number",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=ten"],
            None,
        ),
        (
            "server_max_window_bits needs a value",
            d.clone(),
            &["permessage-deflate; server_max_window_bits"],
            None,
        ),
        (
            "no_context_takeover takes no value",
            d.clone(),
            &["permessage-deflate; server_no_context_takeover=1"],
            None,
        ),
        (
            "client_no_context_takeover takes no value",
            d.clone(),
            &["permessage-deflate; client_no_context_takeover=\"\""],
            None,
        ),
        (
            "empty value",
            d.clone(),
            &["permessage-deflate; server_max_window_bits="],
            None,
        ),
        (
            "unterminated quote",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=\"10"],
            None,
        ),
        (
            "comma inside quotes",
            d.clone(),
            &["permessage-deflate; x=\"a,b\", permessage-deflate"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
        (
            "empty list items",
            d.clone(),
            &[", ,permessage-deflate,"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
        ("empty parameter", d.clone(), &["permessage-deflate;"], None),
        (
            "spaces around =",
            d.clone(),
            &["permessage-deflate ; server_max_window_bits = 10"],
            Some((
                "permessage-deflate; server_max_window_bits=10",
                params(false, false, 10, 15),
            )),
        ),
        (
            "shared policy, Chromium's offer",
            d.clone().policy(DeflatePolicy::Shared),
            &["permessage-deflate; client_max_window_bits"],
            Some((
                "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
                params(true, true, 15, 15),
            )),
        ),
        (
            "dedicated 4k, Chromium's offer: both windows shrunk",
            d.clone().policy(DeflatePolicy::Dedicated(4096)),
            &["permessage-deflate; client_max_window_bits"],
            Some((
                "permessage-deflate; server_max_window_bits=11; client_max_window_bits=11",
                params(false, false, 11, 11),
            )),
        ),
        (
            "dedicated 4k, a client that cannot be limited resets instead",
            d.clone().policy(DeflatePolicy::Dedicated(4096)),
            &["permessage-deflate"],
            Some((
                "permessage-deflate; client_no_context_takeover; server_max_window_bits=11",
                params(false, true, 11, 15),
            )),
        ),
        (
            "dedicated 3k takes a smaller window asked for, and the reset hint",
            d.clone().policy(DeflatePolicy::Dedicated(3072)),
            &[
                "permessage-deflate; server_max_window_bits=9; client_no_context_takeover; client_max_window_bits=12",
            ],
            Some((
                "permessage-deflate; client_no_context_takeover; server_max_window_bits=9; client_max_window_bits=10",
                params(false, true, 9, 10),
            )),
        ),
        (
            "dedicated keeps a smaller configured window",
            d.clone()
                .policy(DeflatePolicy::Dedicated(64 << 10))
                .server_max_window_bits(Some(10)),
            &["permessage-deflate; client_max_window_bits"],
            Some((
                "permessage-deflate; server_max_window_bits=10",
                params(false, false, 10, 15),
            )),
        ),
        (
            "takeover ignores the reset hint, as before",
            d.clone().policy(DeflatePolicy::Takeover),
            &["permessage-deflate; client_no_context_takeover"],
            Some(("permessage-deflate", params(false, false, 15, 15))),
        ),
    ];
    for (what, config, lines, want) in cases {
        let got = negotiate(&config, &headers(lines));
        let got = got.as_ref().map(|(p, v)| (v.to_str().unwrap(), *p));
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn client_response_table() {
    let d = DeflateConfig::default();
    type Case<'a> = (
        &'a str,
        DeflateConfig,
        &'a [&'a str],
        Result<Option<DeflateParams>, ()>,
    );
    let cases: Vec<Case<'_>> = vec![
        ("declined", d.clone(), &[], Ok(None)),
        (
            "accepted bare",
            d.clone(),
            &["permessage-deflate"],
            Ok(Some(params(false, false, 15, 15))),
        ),
        (
            "server resets unasked",
            d.clone(),
            &["permessage-deflate; server_no_context_takeover"],
            Ok(Some(params(true, false, 15, 15))),
        ),
        (
            "server asks us to reset",
            d.clone(),
            &["permessage-deflate; client_no_context_takeover"],
            Ok(Some(params(false, true, 15, 15))),
        ),
        (
            "our promise holds without echo",
            d.clone().client_no_context_takeover(true),
            &["permessage-deflate"],
            Ok(Some(params(false, true, 15, 15))),
        ),
        (
            "server limits our window",
            d.clone(),
            &["permessage-deflate; client_max_window_bits=9"],
            Ok(Some(params(false, false, 15, 9))),
        ),
        (
            "server limits our window to 8",
            d.clone(),
            &["permessage-deflate; client_max_window_bits=8"],
            Ok(Some(params(false, false, 15, 8))),
        ),
        (
            "server states its window unasked",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=10"],
            Ok(Some(params(false, false, 10, 15))),
        ),
        (
            "asked window granted",
            d.clone().server_max_window_bits(Some(10)),
            &["permessage-deflate; server_max_window_bits=10"],
            Ok(Some(params(false, false, 10, 15))),
        ),
        (
            "asked window granted smaller",
            d.clone().server_max_window_bits(Some(10)),
            &["permessage-deflate; server_max_window_bits=9"],
            Ok(Some(params(false, false, 9, 15))),
        ),
        (
            "asked window exceeded",
            d.clone().server_max_window_bits(Some(10)),
            &["permessage-deflate; server_max_window_bits=11"],
            Err(()),
        ),
        (
            "asked window ignored",
            d.clone().server_max_window_bits(Some(10)),
            &["permessage-deflate"],
            Err(()),
        ),
        (
            "asked reset ignored",
            d.clone().server_no_context_takeover(true),
            &["permessage-deflate"],
            Err(()),
        ),
        (
            "asked reset granted",
            d.clone().server_no_context_takeover(true),
            &["permessage-deflate; server_no_context_takeover"],
            Ok(Some(params(true, false, 15, 15))),
        ),
        (
            "our window kept when server is silent",
            d.clone().client_max_window_bits(Some(10)),
            &["permessage-deflate"],
            Ok(Some(params(false, false, 15, 10))),
        ),
        (
            "client window above our offer",
            d.clone().client_max_window_bits(Some(10)),
            &["permessage-deflate; client_max_window_bits=12"],
            Err(()),
        ),
        (
            "bare client_max_window_bits in a response",
            d.clone(),
            &["permessage-deflate; client_max_window_bits"],
            Err(()),
        ),
        (
            "unknown parameter",
            d.clone(),
            &["permessage-deflate; foo=1"],
            Err(()),
        ),
        (
            "duplicate parameter",
            d.clone(),
            &["permessage-deflate; server_no_context_takeover; server_no_context_takeover"],
            Err(()),
        ),
        (
            "bad window",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=16"],
            Err(()),
        ),
        (
            "two elements",
            d.clone(),
            &["permessage-deflate, permessage-deflate"],
            Err(()),
        ),
        (
            "two lines",
            d.clone(),
            &["permessage-deflate", "permessage-deflate"],
            Err(()),
        ),
        (
            "other extension",
            d.clone(),
            &["x-webkit-deflate-frame"],
            Err(()),
        ),
        (
            "malformed",
            d.clone(),
            &["permessage-deflate; server_max_window_bits=\"1"],
            Err(()),
        ),
    ];
    for (what, config, lines, want) in cases {
        let got = check_response(&config, &headers(lines)).map_err(|_| ());
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn every_offer_we_make_is_accepted_by_our_server() {
    for snct in [false, true] {
        for cnct in [false, true] {
            for smwb in [None, Some(8), Some(12), Some(15)] {
                for cmwb in [None, Some(8), Some(11)] {
                    let client = DeflateConfig::default()
                        .server_no_context_takeover(snct)
                        .client_no_context_takeover(cnct)
                        .server_max_window_bits(smwb)
                        .client_max_window_bits(cmwb);
                    let mut req = HeaderMap::new();
                    req.insert(SEC_WEBSOCKET_EXTENSIONS, offer(&client));
                    let server = DeflateConfig::default().client_max_window_bits(Some(13));
                    let (agreed, answer) = negotiate(&server, &req).expect("accepted");
                    let mut resp = HeaderMap::new();
                    resp.insert(SEC_WEBSOCKET_EXTENSIONS, answer);
                    let seen = check_response(&client, &resp).unwrap().unwrap();
                    assert_eq!(
                        seen.server_no_context_takeover,
                        agreed.server_no_context_takeover
                    );
                    assert_eq!(seen.server_max_window_bits, agreed.server_max_window_bits);
                    assert_eq!(seen.client_max_window_bits, agreed.client_max_window_bits);
                    assert!(seen.client_max_window_bits <= cmwb.unwrap_or(15).min(13));
                    assert_eq!(seen.server_max_window_bits, smwb.unwrap_or(15));
                }
            }
        }
    }
}

#[test]
fn a_client_offers_what_its_policy_asks() {
    let d = DeflateConfig::default;
    let offered = |c: DeflateConfig| offer(&c).to_str().unwrap().to_owned();
    assert_eq!(
        offered(d().policy(DeflatePolicy::Shared)),
        "permessage-deflate; client_max_window_bits; client_no_context_takeover; server_no_context_takeover"
    );
    // Its own window bare: a server may answer any, the compressor
    // keeps to its own.
    assert_eq!(
        offered(d().policy(DeflatePolicy::Dedicated(4096))),
        "permessage-deflate; client_max_window_bits; server_max_window_bits=11"
    );
    // A server that allows the client more than the policy keeps is
    // accepted (Autobahn's 13.4 cases answer 15).
    let mut resp = HeaderMap::new();
    resp.insert(
        SEC_WEBSOCKET_EXTENSIONS,
        HeaderValue::from_static(
            "permessage-deflate; server_max_window_bits=11; client_max_window_bits=15",
        ),
    );
    let seen = check_response(&d().policy(DeflatePolicy::Dedicated(4096)), &resp);
    assert_eq!(seen.unwrap(), Some(params(false, false, 11, 15)));
}

#[test]
fn every_policy_agrees_with_every_policy() {
    let policies = [
        DeflatePolicy::Takeover,
        DeflatePolicy::Shared,
        DeflatePolicy::Dedicated(1024),
        DeflatePolicy::Dedicated(3072),
        DeflatePolicy::Dedicated(16 << 10),
        DeflatePolicy::Dedicated(256 << 10),
    ];
    for ours in policies {
        for theirs in policies {
            let client = DeflateConfig::default().policy(ours);
            let server = DeflateConfig::default().policy(theirs);
            let mut req = HeaderMap::new();
            req.insert(SEC_WEBSOCKET_EXTENSIONS, offer(&client));
            let (agreed, answer) = negotiate(&server, &req).expect("accepted");
            let mut resp = HeaderMap::new();
            resp.insert(SEC_WEBSOCKET_EXTENSIONS, answer);
            let seen = check_response(&client, &resp).unwrap().unwrap();
            // A client's promise to reset holds whether or not the
            // server repeats it.
            let mut promised = agreed;
            promised.client_no_context_takeover |= seen.client_no_context_takeover;
            assert_eq!(seen, promised, "{ours:?} to {theirs:?}");
            // Each side's policy holds whatever the other's, as that
            // side sees the agreement: nothing kept with the shared
            // policy, windows within a dedicated one's.
            for (policy, view, server_side) in [(ours, seen, false), (theirs, agreed, true)] {
                let (s, c) = (view.server_max_window_bits, view.client_max_window_bits);
                let (s_reset, c_reset) = (
                    view.server_no_context_takeover,
                    view.client_no_context_takeover,
                );
                match policy.windows() {
                    // A client's own window is its compressor's to
                    // keep small (see `deflate::pair`), not the
                    // negotiation's.
                    Some((ws, wc)) if server_side => {
                        assert!(s <= ws || s_reset, "{policy:?} {view:?}");
                        assert!(c <= wc || c_reset, "{policy:?} {view:?}");
                    }
                    Some((ws, _)) => assert!(s <= ws || s_reset, "{policy:?} {view:?}"),
                    None if policy == DeflatePolicy::Shared => {
                        assert!(s_reset && c_reset, "{policy:?} {view:?}");
                    }
                    None => {}
                }
            }
        }
    }
}
