//! The loop's ordering promise where commands abort: the caller's reply and the aborted
//! client's samples go out only once the gauges no longer count the aborted request. The
//! commands are applied one by one, never followed by the turn's own publish, so a reply
//! sent before the gauges were set finds them stale every time.

use std::sync::Arc;
use std::time::Instant;

use sprout::engine::{Engine, EngineConfig, KvSize};
use sprout::formats::WeightFormat;
use sprout::gpu::{BackendChoice, Gpu};
use sprout::model::decoder::Decoder;
use sprout::model::dummy::{DummyWeights, builtin_config};
use sprout::sched::{FinishReason, Request, SamplingParams};
use tokio::sync::{mpsc as tmpsc, oneshot};

use super::*;

/// The built-in tiny Llama with random weights, on the first adapter found.
fn decoder() -> Decoder {
    let gpu = pollster::block_on(Gpu::open(BackendChoice::Auto)).expect("a GPU adapter");
    let config = builtin_config("tiny-llama").unwrap();
    let mut source = DummyWeights::new(config, WeightFormat::F32, 1).unwrap();
    Decoder::load(gpu, &mut source, &mut |_, _| {}).unwrap()
}

fn engine_loop(decoder: &Decoder) -> EngineLoop<'_> {
    let config = EngineConfig {
        kv: KvSize::Blocks(64),
        ..EngineConfig::default()
    };
    let engine = Engine::new(decoder, &config).unwrap();
    let metrics = Arc::new(Metrics::new("tiny", engine.num_blocks()).unwrap());
    let status = Arc::new(std::sync::Mutex::new(EngineStatus {
        sleep: SleepState::default(),
        weights: decoder.residency(),
        memory: engine.device_memory(),
    }));
    EngineLoop::new(engine, metrics, status, false)
}

/// Adds request `index` (2 samples, far from done) and steps until the gauges count it
/// running; its events' receiver.
fn start(l: &mut EngineLoop<'_>, index: u32) -> tmpsc::UnboundedReceiver<Event> {
    let (events, receiver) = tmpsc::unbounded_channel();
    let (reply, mut added) = oneshot::channel();
    let params = SamplingParams {
        max_tokens: 200,
        ..SamplingParams::default()
    };
    let requests = vec![Request {
        index,
        prompt: vec![1, 2, 3, 4, 5],
        n: 2,
        params,
        forced: Vec::new(),
        cache_salt: None,
        lora: false,
    }];
    l.apply(Command::Add {
        requests,
        stream_tokens: false,
        events,
        arrived: Instant::now(),
        adapter: None,
        reply,
    });
    assert_eq!(added.try_recv(), Ok(Ok(())));
    for _ in 0..8 {
        l.step();
        if l.metrics.num_requests_running.get() == 1 {
            return receiver;
        }
    }
    panic!("request {index} was not counted running after 8 steps");
}

/// Once `reply` has come and the client holds its aborted samples, the gauges count
/// nothing running, waiting or holding blocks.
fn assert_heard_after_gauges<T: std::fmt::Debug>(
    l: &EngineLoop<'_>,
    mut reply: oneshot::Receiver<T>,
    mut events: tmpsc::UnboundedReceiver<Event>,
    what: &str,
) {
    let replied = reply.try_recv();
    assert!(replied.is_ok(), "{what}: no reply ({replied:?})");
    for _ in 0..2 {
        match events.try_recv() {
            Ok(Event::Finished(s)) => assert_eq!(s.finish_reason, FinishReason::Abort, "{what}"),
            other => panic!("{what}: expected an aborted sample, got {other:?}"),
        }
    }
    let m = &l.metrics;
    let gauges = (
        m.num_requests_running.get(),
        m.num_requests_waiting.get(),
        m.kv_blocks_in_use.get(),
    );
    assert_eq!(
        gauges,
        (0, 0, 0),
        "{what}: (running, waiting, blocks) when heard back"
    );
}

#[test]
fn an_abort_is_heard_of_only_after_the_gauges_drop_it() {
    let decoder = decoder();
    {
        let mut l = engine_loop(&decoder);
        let events = start(&mut l, 0);
        let (reply, answer) = oneshot::channel();
        let indexes = Some(vec![0]);
        l.apply(Command::AbortRequests { indexes, reply });
        assert_heard_after_gauges(&l, answer, events, "/abort_requests by id");
    }
    {
        let mut l = engine_loop(&decoder);
        let events = start(&mut l, 0);
        let (reply, answer) = oneshot::channel();
        l.apply(Command::AbortRequests {
            indexes: None,
            reply,
        });
        assert_heard_after_gauges(&l, answer, events, "/abort_requests of all");
    }
    {
        let mut l = engine_loop(&decoder);
        let events = start(&mut l, 0);
        let (reply, answer) = oneshot::channel();
        let mode = PauseMode::Abort;
        l.apply(Command::Pause { mode, reply });
        assert_heard_after_gauges(&l, answer, events, "/pause?mode=abort");
    }
}
