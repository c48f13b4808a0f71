#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use super::*;

/// A machine under a virtual clock: times are milliseconds from its start.
struct H {
    m: Machine,
    t0: Instant,
    now: u64,
}

const A: &str = "http://node-a/whep/cam/s1";
const B: &str = "http://node-b/whep/cam/s1";

impl H {
    fn new(kind: Kind) -> H {
        H {
            m: Machine::new(kind, Config::default(), 7, "k"),
            t0: Instant::now(),
            now: 0,
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn drain(&mut self) -> Vec<Command> {
        std::iter::from_fn(|| self.m.poll_command()).collect()
    }

    fn input(&mut self, ms: u64, input: Input) -> Vec<Command> {
        assert!(ms >= self.now, "time goes forward");
        self.now = ms;
        self.m.handle_input(self.at(ms), input);
        self.drain()
    }

    /// Runs every timer due up to `ms`.
    fn run_to(&mut self, ms: u64) -> Vec<Command> {
        let mut out = Vec::new();
        while let Some(t) = self.m.poll_timeout() {
            if t > self.at(ms) {
                break;
            }
            self.now = (t - self.t0).as_millis() as u64;
            self.m.handle_timeout(t);
            out.extend(self.drain());
        }
        self.now = ms;
        out
    }

    fn next_ms(&self) -> Option<u64> {
        self.m
            .poll_timeout()
            .map(|t| (t - self.t0).as_millis() as u64)
    }

    /// Started, answered by node-a and connected; for play, frames flow at 30 fps up to `ms`.
    fn connected(kind: Kind, until: u64) -> H {
        let mut h = H::new(kind);
        h.input(0, Input::Start { ticket: None });
        h.input(
            40,
            Input::Answered {
                transport: 1,
                location: A.into(),
                session: "s1".into(),
                node: Some("node-a".into()),
                ticket: Some("t1".into()),
            },
        );
        h.input(80, Input::Connected { transport: 1 });
        assert_eq!(h.m.state(), State::Connected);
        if kind == Kind::Play {
            h.frames(1, 100, until, 1);
        }
        h
    }

    /// Frames on `transport` every 33 ms in [from, to]; returns the last total.
    fn frames(&mut self, transport: u32, from: u64, to: u64, first: u64) -> u64 {
        let mut total = first;
        let mut t = from;
        while t <= to {
            self.input(t, Input::Frames { transport, total });
            total += 1;
            t += 33;
        }
        total - 1
    }
}

fn emitted(cmds: &[Command]) -> Vec<&Event> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Emit(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn states(cmds: &[Command]) -> Vec<State> {
    emitted(cmds)
        .into_iter()
        .filter_map(|e| match e {
            Event::State { state, .. } => Some(*state),
            _ => None,
        })
        .collect()
}

fn migrated(cmds: &[Command]) -> Option<(Mode, u64, u64)> {
    emitted(cmds).into_iter().find_map(|e| match e {
        Event::Migrated {
            mode,
            blackout_ms,
            first_frame_ms,
            ..
        } => Some((*mode, *blackout_ms, *first_frame_ms)),
        _ => None,
    })
}

#[test]
fn connects_and_follows_its_url() {
    let mut h = H::new(Kind::Play);
    let c = h.input(0, Input::Start { ticket: None });
    assert_eq!(
        c,
        vec![
            Command::Emit(Event::State {
                state: State::Connecting,
                previous: State::Idle,
                reason: None
            }),
            Command::Post {
                transport: 1,
                endpoint: Endpoint::Gateway,
                idempotency_key: "k-1".into(),
                ticket: None,
                failed_node: None
            }
        ]
    );
    assert_eq!(h.next_ms(), Some(10_000), "connect timeout");
    let c = h.input(
        40,
        Input::Answered {
            transport: 1,
            location: A.into(),
            session: "s1".into(),
            node: Some("node-a".into()),
            ticket: Some("t1".into()),
        },
    );
    assert_eq!(
        c,
        vec![Command::StoreTicket {
            ticket: Some("t1".into())
        }]
    );
    let c = h.input(80, Input::Connected { transport: 1 });
    assert_eq!(
        c,
        vec![
            Command::Adopt { transport: 1 },
            Command::Subscribe { location: A.into() },
            Command::Emit(Event::State {
                state: State::Connected,
                previous: State::Connecting,
                reason: None
            }),
        ]
    );
    assert_eq!(h.m.location(), Some(A));
    assert_eq!(h.m.node(), Some("node-a"));
    assert_eq!(h.next_ms(), None);
}

#[test]
fn a_persisted_ticket_goes_with_the_first_post() {
    let mut h = H::new(Kind::Publish);
    let c = h.input(
        0,
        Input::Start {
            ticket: Some("saved".into()),
        },
    );
    assert!(
        c.iter()
            .any(|c| matches!(c, Command::Post { ticket: Some(t), .. } if t == "saved"))
    );
}

#[test]
fn ice_restart_migration_reports_blackout_and_first_frame() {
    let mut h = H::connected(Kind::Play, 1000);
    let c = h.input(
        1010,
        Input::Migrate(MigrateEvent {
            mode: Mode::IceRestart,
            from: Some("node-a".into()),
            target: "node-b".into(),
            location: B.into(),
            ticket: None,
        }),
    );
    assert_eq!(states(&c), vec![State::Migrating]);
    assert!(c.contains(&Command::RestartIce {
        transport: 1,
        location: B.into()
    }));
    assert_eq!(h.next_ms(), Some(3010), "switch timeout");
    let c = h.input(1040, Input::RestartAnswered { transport: 1 });
    assert_eq!(c, vec![Command::Subscribe { location: B.into() }]);
    assert_eq!(h.m.location(), Some(B));
    // The frame after the answer: media flows through node-b.
    let c = h.input(
        1090,
        Input::Frames {
            transport: 1,
            total: 100,
        },
    );
    assert_eq!(states(&c), vec![State::Connected]);
    h.frames(1, 1123, 1700, 101);
    let c = h.run_to(1700);
    // Frames at ..., 991, 1090, 1123, ...: the largest gap is 99 ms; the first frame came
    // 80 ms after the event.
    assert_eq!(migrated(&c), Some((Mode::IceRestart, 99, 80)));
    assert_eq!(h.m.node(), Some("node-b"));
}

#[test]
fn edge_migration_looks_back_for_its_blackout() {
    let mut h = H::connected(Kind::Play, 1000);
    // A 150 ms hole before the event (the cutover happened before the server announced it).
    h.frames(1, 1150, 1300, 100);
    let c = h.input(
        1310,
        Input::Migrate(MigrateEvent {
            mode: Mode::Edge,
            from: None,
            target: "node-b".into(),
            location: B.into(),
            ticket: None,
        }),
    );
    assert_eq!(states(&c), vec![State::Migrating, State::Connected]);
    assert!(c.contains(&Command::Subscribe { location: B.into() }));
    h.frames(1, 1333, 1900, 106);
    let c = h.run_to(1900);
    let (mode, blackout, first) = migrated(&c).unwrap();
    assert_eq!((mode, first), (Mode::Edge, 0));
    assert_eq!(blackout, 1150 - 991, "the hole before the event");
}

#[test]
fn reconnect_migration_swaps_transports_at_the_first_new_frame() {
    let mut h = H::connected(Kind::Play, 1000);
    let c = h.input(
        1010,
        Input::Migrate(MigrateEvent {
            mode: Mode::Reconnect,
            from: Some("node-a".into()),
            target: "node-b".into(),
            location: "http://node-b/whep/cam".into(),
            ticket: Some("mig".into()),
        }),
    );
    assert!(c.contains(&Command::Post {
        transport: 2,
        endpoint: Endpoint::Url("http://node-b/whep/cam".into()),
        idempotency_key: "k-2".into(),
        ticket: Some("mig".into()),
        failed_node: None,
    }));
    // The old transport goes on until the new one has media.
    h.frames(1, 1023, 1056, 31);
    let c = h.input(
        1060,
        Input::Answered {
            transport: 2,
            location: B.into(),
            session: "s1".into(),
            node: Some("node-b".into()),
            ticket: Some("t2".into()),
        },
    );
    assert_eq!(
        c,
        vec![Command::StoreTicket {
            ticket: Some("t2".into())
        }]
    );
    assert_eq!(h.m.location(), Some(A), "still on the old transport");
    h.input(
        1089,
        Input::Frames {
            transport: 1,
            total: 33,
        },
    );
    let c = h.input(
        1200,
        Input::Frames {
            transport: 2,
            total: 1,
        },
    );
    assert!(c.contains(&Command::Adopt { transport: 2 }));
    assert!(c.contains(&Command::Subscribe { location: B.into() }));
    assert_eq!(h.m.current_transport(), Some(2));
    // Frames of the old transport no longer count.
    h.input(
        1210,
        Input::Frames {
            transport: 1,
            total: 99,
        },
    );
    h.frames(2, 1233, 1800, 2);
    let c = h.run_to(1800);
    // Old frames until 1089, the new one at 1200.
    assert_eq!(migrated(&c), Some((Mode::Reconnect, 111, 190)));
}

#[test]
fn a_dead_node_is_left_through_the_gateway_with_the_ticket() {
    let mut h = H::connected(Kind::Play, 1000);
    let c = h.input(
        1010,
        Input::Lost {
            transport: 1,
            cause: LossCause::NodeUnreachable,
        },
    );
    assert_eq!(states(&c), vec![State::Reconnecting]);
    // Step 1: an ICE restart where the session was.
    assert!(c.contains(&Command::RestartIce {
        transport: 1,
        location: A.into()
    }));
    assert_eq!(h.next_ms(), Some(2010), "restart timeout");
    // Connection refused at once.
    let c = h.input(
        1012,
        Input::RestartFailed {
            transport: 1,
            status: 0,
            reason: "connection refused".into(),
        },
    );
    assert!(c.contains(&Command::Post {
        transport: 2,
        endpoint: Endpoint::Gateway,
        idempotency_key: "k-2".into(),
        ticket: Some("t1".into()),
        failed_node: Some("node-a".into()),
    }));
    h.input(
        1030,
        Input::Answered {
            transport: 2,
            location: B.into(),
            session: "s1".into(),
            node: Some("node-b".into()),
            ticket: Some("t2".into()),
        },
    );
    let c = h.input(
        1250,
        Input::Frames {
            transport: 2,
            total: 1,
        },
    );
    assert_eq!(states(&c), vec![State::Connected]);
    assert!(emitted(&c).contains(&&Event::Reconnected {
        downtime_ms: 240,
        how: Mode::Reconnect,
        resumed: true,
        node: Some("node-b".into()),
    }));
    assert_eq!(h.m.ticket(), Some("t2"));
}

#[test]
fn a_refused_ticket_falls_back_to_a_clean_session() {
    for status in [403, 409, 410] {
        let mut h = H::connected(Kind::Play, 200);
        h.input(
            300,
            Input::Lost {
                transport: 1,
                cause: LossCause::Ice,
            },
        );
        h.input(
            301,
            Input::RestartFailed {
                transport: 1,
                status: 404,
                reason: "no session".into(),
            },
        );
        let c = h.input(
            310,
            Input::PostFailed {
                transport: 2,
                status,
                reason: "ticket".into(),
            },
        );
        assert!(emitted(&c).iter().any(
            |e| matches!(e, Event::Error { code, status: s, .. } if code == "ticket-rejected" && *s == status)
        ));
        assert!(c.contains(&Command::StoreTicket { ticket: None }));
        assert!(c.contains(&Command::CloseTransport { transport: 2 }));
        assert!(c.contains(&Command::Post {
            transport: 3,
            endpoint: Endpoint::Gateway,
            idempotency_key: "k-3".into(),
            ticket: None,
            failed_node: Some("node-a".into()),
        }));
        h.input(
            330,
            Input::Answered {
                transport: 3,
                location: B.into(),
                session: "s9".into(),
                node: Some("node-b".into()),
                ticket: Some("t9".into()),
            },
        );
        let c = h.input(
            400,
            Input::Frames {
                transport: 3,
                total: 1,
            },
        );
        assert!(
            emitted(&c)
                .iter()
                .any(|e| matches!(e, Event::Reconnected { resumed: false, .. }))
        );
        assert_eq!(h.m.session(), Some("s9"));
    }
}

#[test]
fn retries_back_off_exponentially_with_jitter_and_give_up() {
    let mut h = H::connected(Kind::Publish, 100);
    h.input(
        200,
        Input::Lost {
            transport: 1,
            cause: LossCause::Ice,
        },
    );
    h.input(
        201,
        Input::RestartFailed {
            transport: 1,
            status: 0,
            reason: "refused".into(),
        },
    );
    let mut delays = Vec::new();
    let mut keys = Vec::new();
    let mut transport = 2;
    let mut now = 202;
    loop {
        let c = h.input(
            now,
            Input::PostFailed {
                transport,
                status: 0,
                reason: "refused".into(),
            },
        );
        if h.m.state() == State::Failed {
            assert!(
                emitted(&c)
                    .iter()
                    .any(|e| matches!(e, Event::Error { code, .. } if code == "gave-up"))
            );
            break;
        }
        let d = emitted(&c)
            .iter()
            .find_map(|e| match e {
                Event::Reconnecting { delay_ms, .. } => Some(*delay_ms),
                _ => None,
            })
            .unwrap();
        delays.push(d);
        let c = h.run_to(now + d);
        let Some(Command::Post {
            transport: t,
            idempotency_key,
            ..
        }) = c.iter().find(|c| matches!(c, Command::Post { .. }))
        else {
            panic!("no retry in {c:?}");
        };
        transport = *t;
        keys.push(idempotency_key.clone());
        now += d;
    }
    assert_eq!(delays.len(), Config::default().max_attempts as usize);
    for (i, d) in delays.iter().enumerate() {
        let base = (100u64 << i).min(5000);
        assert!(*d >= base && *d <= base * 3 / 2, "attempt {i}: {d} ms");
    }
    assert!(delays.iter().any(|d| d % 100 != 0), "jitter: {delays:?}");
    // No answer means the server may have made the session: the same request again.
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
}

#[test]
fn a_migration_that_fails_falls_back_to_the_source_then_the_gateway() {
    let mut h = H::connected(Kind::Publish, 100);
    h.input(
        200,
        Input::Migrate(MigrateEvent {
            mode: Mode::IceRestart,
            from: None,
            target: "node-b".into(),
            location: B.into(),
            ticket: None,
        }),
    );
    // The target never answers.
    let c = h.run_to(2200);
    assert!(
        emitted(&c)
            .iter()
            .any(|e| matches!(e, Event::Error { code, .. } if code == "migration-timeout"))
    );
    assert_eq!(h.m.state(), State::Reconnecting);
    assert!(c.contains(&Command::RestartIce {
        transport: 1,
        location: A.into()
    }));
    let c = h.input(2210, Input::RestartAnswered { transport: 1 });
    assert_eq!(c, vec![Command::Subscribe { location: A.into() }]);
    let c = h.input(2230, Input::Connected { transport: 1 });
    assert_eq!(states(&c), vec![State::Connected]);
    assert!(emitted(&c).iter().any(|e| matches!(
        e,
        Event::Reconnected {
            how: Mode::IceRestart,
            downtime_ms: 30,
            ..
        }
    )));
}

#[test]
fn video_goes_off_when_the_network_cannot_carry_it_and_comes_back() {
    let mut h = H::connected(Kind::Publish, 100);
    for (i, bps) in [900_000, 100_000, 90_000].into_iter().enumerate() {
        let c = h.input(1000 * (i as u64 + 1), Input::Throughput { bps, loss: 0.0 });
        assert!(c.is_empty(), "{c:?}");
    }
    let c = h.input(
        4000,
        Input::Throughput {
            bps: 80_000,
            loss: 0.0,
        },
    );
    assert!(c.contains(&Command::SetVideo { enabled: false }));
    assert_eq!(states(&c), vec![State::Degraded]);
    // Good figures, but video waits `probe_after`.
    let c = h.input(
        9000,
        Input::Throughput {
            bps: 60_000,
            loss: 0.0,
        },
    );
    assert!(c.is_empty());
    let c = h.input(
        14_000,
        Input::Throughput {
            bps: 60_000,
            loss: 0.01,
        },
    );
    assert!(c.contains(&Command::SetVideo { enabled: true }));
    assert_eq!(states(&c), vec![State::Connected]);
    // It fails again at once: the next wait is twice as long.
    for t in [15_000, 16_000, 17_000] {
        h.input(
            t,
            Input::Throughput {
                bps: 50_000,
                loss: 0.3,
            },
        );
    }
    assert_eq!(h.m.state(), State::Degraded);
    let c = h.input(
        30_000,
        Input::Throughput {
            bps: 50_000,
            loss: 0.0,
        },
    );
    assert!(c.is_empty(), "20 s now: {c:?}");
    let c = h.input(
        37_000,
        Input::Throughput {
            bps: 50_000,
            loss: 0.0,
        },
    );
    assert!(c.contains(&Command::SetVideo { enabled: true }));
}

#[test]
fn close_deletes_and_forgets_the_ticket() {
    let mut h = H::connected(Kind::Play, 200);
    let c = h.input(300, Input::Close);
    assert_eq!(
        c,
        vec![
            Command::Delete { location: A.into() },
            Command::StoreTicket { ticket: None },
            Command::CloseTransport { transport: 1 },
            Command::Emit(Event::State {
                state: State::Closed,
                previous: State::Connected,
                reason: Some("closed".into())
            }),
        ]
    );
    assert!(h.input(400, Input::Start { ticket: None }).is_empty());
    assert_eq!(h.next_ms(), None);
}

#[test]
fn a_first_post_refused_fails_with_the_reason() {
    let mut h = H::new(Kind::Play);
    h.input(0, Input::Start { ticket: None });
    let c = h.input(
        10,
        Input::PostFailed {
            transport: 1,
            status: 404,
            reason: "stream cam has no publisher".into(),
        },
    );
    assert_eq!(h.m.state(), State::Failed);
    assert!(emitted(&c).iter().any(|e| matches!(
        e,
        Event::State { state: State::Failed, reason: Some(r), .. } if r.contains("no publisher")
    )));
}

#[test]
fn stale_inputs_of_other_transports_change_nothing() {
    let mut h = H::connected(Kind::Play, 200);
    for input in [
        Input::Connected { transport: 9 },
        Input::Lost {
            transport: 9,
            cause: LossCause::Ice,
        },
        Input::RestartAnswered { transport: 1 },
        Input::Answered {
            transport: 1,
            location: B.into(),
            session: "x".into(),
            node: None,
            ticket: None,
        },
        Input::PostFailed {
            transport: 1,
            status: 500,
            reason: String::new(),
        },
    ] {
        assert!(h.input(300, input).is_empty());
    }
    assert_eq!(h.m.state(), State::Connected);
    assert_eq!(h.m.location(), Some(A));
}

/// The scenarios both machines replay (`sdk-client/fsm-scenarios.json`): inputs at virtual
/// times, and after each step the exact commands, the state and the next timeout. Set
/// `FERRY_FSM_BLESS=1` to record what this machine does (then read the diff).
#[test]
fn scenarios_replay_exactly() {
    use serde_json::{Value, json};
    // The package as cargo runs the test (not where it was compiled: a shared target
    // directory may hold a build from another checkout).
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or(env!("CARGO_MANIFEST_DIR").into());
    let path = std::path::Path::new(&dir).join("fsm-scenarios.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    let bless = std::env::var_os("FERRY_FSM_BLESS").is_some();
    let mut failures = Vec::new();
    for sc in doc["scenarios"].as_array_mut().unwrap() {
        let name = sc["name"].as_str().unwrap().to_owned();
        let kind: Kind = serde_json::from_value(sc["kind"].clone()).unwrap();
        let cfg: Config =
            serde_json::from_value(sc.get("config").cloned().unwrap_or(json!({}))).unwrap();
        let seed = sc["seed"].as_u64().unwrap() as u32;
        let t0 = Instant::now();
        let mut m = Machine::new(kind, cfg, seed, sc["keySeed"].as_str().unwrap());
        for (i, step) in sc["steps"].as_array_mut().unwrap().iter_mut().enumerate() {
            let at = t0 + Duration::from_millis(step["at"].as_u64().unwrap());
            match step.get("input") {
                Some(input) => m.handle_input(at, serde_json::from_value(input.clone()).unwrap()),
                None => m.handle_timeout(at),
            }
            let commands: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
            let got = json!({
                "commands": commands,
                "state": m.state(),
                "next": m.poll_timeout().map(|t| (t - t0).as_millis() as u64),
            });
            if bless {
                step["expect"] = got;
            } else if step["expect"] != got {
                failures.push(format!(
                    "{name} step {i}: expected {}\n got {}",
                    step["expect"], got
                ));
            }
        }
    }
    if bless {
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_player_degrades_on_loss_not_on_a_cheap_stream_and_still_migrates() {
    let mut h = H::connected(Kind::Play, 200);
    // A still scene: 60 kbit/s, no loss. Nothing to do.
    for t in [1000, 2000, 3000, 4000] {
        assert!(
            h.input(
                t,
                Input::Throughput {
                    bps: 60_000,
                    loss: 0.0
                }
            )
            .is_empty()
        );
    }
    for t in [5000, 6000, 7000] {
        h.input(
            t,
            Input::Throughput {
                bps: 900_000,
                loss: 0.4,
            },
        );
    }
    assert_eq!(h.m.state(), State::Degraded);
    // No video comes while degraded: an ICE-restart migration completes when the path works.
    h.input(
        7100,
        Input::Migrate(MigrateEvent {
            mode: Mode::IceRestart,
            from: None,
            target: "node-b".into(),
            location: B.into(),
            ticket: None,
        }),
    );
    h.input(7120, Input::RestartAnswered { transport: 1 });
    let c = h.input(7140, Input::Connected { transport: 1 });
    assert_eq!(states(&c), vec![State::Degraded]);
    assert_eq!(h.m.location(), Some(B));
}

#[test]
fn the_server_ending_the_session_closes_it_without_a_retry() {
    let mut h = H::connected(Kind::Play, 200);
    let c = h.input(
        300,
        Input::Ended {
            reason: "publisher-gone".into(),
        },
    );
    assert!(c.contains(&Command::StoreTicket { ticket: None }));
    assert_eq!(h.m.state(), State::Closed);
    assert!(emitted(&c).iter().any(
        |e| matches!(e, Event::State { state: State::Closed, reason: Some(r), .. } if r == "publisher-gone")
    ));
    assert_eq!(h.next_ms(), None);
}
