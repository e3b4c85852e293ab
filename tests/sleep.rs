//! Sleep and wake on every adapter: sleeping frees the engine's device memory (its KV
//! pool and step buffers, and its weights at either level), and the engine woken (level
//! 1), or given the same weights again (level 2), draws bitwise the samples it drew
//! before; sequences in flight when it sleeps are preempted and finish as if it never
//! had; a step while asleep is an error naming what sleeps, and changes nothing. Every
//! test fails, never skips, when no adapter is found.

mod common;

use std::path::Path;

use common::{gpus, tiny_llama};
use sprout::engine::{Engine, EngineConfig, KvSize, SleepLevel};
use sprout::error::SproutError;
use sprout::model::decoder::Decoder;
use sprout::model::safetensors_dir::SafetensorsDir;
use sprout::model::weight_residency::Residency;
use sprout::sched::{FinishedSample, Request, SamplingParams};

fn config() -> EngineConfig {
    EngineConfig {
        kv: KvSize::Blocks(256),
        ..EngineConfig::default()
    }
}

fn request(index: u32, seed: u64) -> Request {
    Request {
        index,
        prompt: vec![
            5, 17, 42, 99, 3, 250, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
        ],
        n: 3,
        params: SamplingParams {
            temperature: 1.0,
            seed,
            own_seed: true,
            max_tokens: 20,
            stop_ids: vec![],
            ..SamplingParams::default()
        },
        forced: Vec::new(),
        cache_salt: None,
        lora: false,
    }
}

fn run(engine: &mut Engine<'_>, requests: &[Request]) -> Vec<FinishedSample> {
    for r in requests {
        engine.add_request(r.clone()).unwrap();
    }
    pollster::block_on(engine.run_to_completion(|_| {})).unwrap()
}

/// Tokens, and log-probs as bits.
fn bits(samples: &[FinishedSample]) -> Vec<(Vec<u32>, Vec<u32>)> {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect();
    samples
        .iter()
        .map(|s| (s.token_ids.clone(), bits(&s.logprobs)))
        .collect()
}

/// What the decoder holds on the device besides its weights (the RoPE tables).
fn tables(decoder: &Decoder) -> u64 {
    decoder.device_bytes() - decoder.weights().unwrap().device_bytes()
}

#[test]
fn level_1_frees_the_device_and_wakes_to_bitwise_the_same_samples() {
    for gpu in gpus() {
        let decoder = tiny_llama(&gpu);
        let mut engine = Engine::new(&decoder, &config()).unwrap();
        let before = bits(&run(&mut engine, &[request(0, 1)]));
        let tables = tables(&decoder);
        let held = engine.device_bytes();
        let weights = decoder.weights().unwrap().device_bytes();
        let allocator_before = gpu.allocator_bytes();

        pollster::block_on(engine.sleep(SleepLevel::Offload)).unwrap();
        assert_eq!(decoder.residency(), Residency::Host);
        assert!(!engine.kv_cache_resident());
        assert_eq!(
            engine.device_bytes(),
            tables,
            "{}: only the RoPE tables stay on the device (of {held} bytes)",
            gpu.adapter.name
        );
        assert_eq!(decoder.host_bytes(), weights);
        // Where the backend reports its allocator, the freed buffers are freed there too.
        if let (Some(before), Some(after)) = (allocator_before, gpu.allocator_bytes()) {
            let freed = before.allocated - after.allocated;
            assert!(
                freed >= held - tables,
                "{}: the allocator freed {freed} bytes, the engine {}",
                gpu.adapter.name,
                held - tables
            );
        }

        pollster::block_on(engine.restore_weights()).unwrap();
        pollster::block_on(engine.restore_kv_cache()).unwrap();
        assert_eq!(decoder.residency(), Residency::Device);
        assert_eq!(engine.device_bytes(), held, "{}", gpu.adapter.name);
        // Awake, before any step: the allocator holds no more beside the engine's buffers
        // than before the sleep (the weights' upload staging is freed: Gpu::flush_uploads).
        if let (Some(before), Some(after)) = (allocator_before, gpu.allocator_bytes()) {
            let beside = |allocated: u64| i128::from(allocated) - i128::from(held);
            assert!(
                beside(after.allocated) <= beside(before.allocated),
                "{}: awake the allocator holds {} bytes beside the engine's, {} before the sleep",
                gpu.adapter.name,
                beside(after.allocated),
                beside(before.allocated)
            );
        }
        let after = bits(&run(&mut engine, &[request(1, 1)]));
        assert_eq!(before, after, "{}", gpu.adapter.name);
    }
}

#[test]
fn level_2_discards_the_weights_and_the_same_weights_loaded_again_give_the_same_samples() {
    for gpu in gpus() {
        let decoder = tiny_llama(&gpu);
        let mut engine = Engine::new(&decoder, &config()).unwrap();
        let before = bits(&run(&mut engine, &[request(0, 3)]));
        let tables = tables(&decoder);

        pollster::block_on(engine.sleep(SleepLevel::Discard)).unwrap();
        assert_eq!(decoder.residency(), Residency::Discarded);
        assert_eq!(engine.device_bytes(), tables, "{}", gpu.adapter.name);
        assert_eq!(decoder.host_bytes(), 0);
        // Discarded weights cannot be woken: only new ones make the model run again.
        let refused = pollster::block_on(engine.restore_weights()).unwrap_err();
        assert!(matches!(refused, SproutError::Asleep(_)), "{refused}");
        assert!(refused.to_string().contains("discarded"), "{refused}");

        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama");
        let mut source = SafetensorsDir::open(dir).unwrap();
        let same = decoder.load_update(&mut source, &mut |_, _| {}).unwrap();
        engine.update_weights(same, 0);
        pollster::block_on(engine.restore_kv_cache()).unwrap();
        let after = bits(&run(&mut engine, &[request(1, 3)]));
        assert_eq!(before, after, "{}", gpu.adapter.name);
    }
}

#[test]
fn sequences_in_flight_are_preempted_and_finish_as_if_the_engine_never_slept() {
    for gpu in gpus() {
        let decoder = tiny_llama(&gpu);
        let mut engine = Engine::new(&decoder, &config()).unwrap();
        let straight = bits(&run(&mut engine, &[request(0, 5), request(1, 6)]));

        let mut engine = Engine::new(&decoder, &config()).unwrap();
        engine.add_request(request(0, 5)).unwrap();
        engine.add_request(request(1, 6)).unwrap();
        let mut finished = Vec::new();
        for _ in 0..6 {
            finished.extend(pollster::block_on(engine.step()).unwrap().finished);
        }
        let settled = pollster::block_on(engine.sleep(SleepLevel::Offload)).unwrap();
        finished.extend(settled.finished);
        assert!(
            engine.has_work(),
            "the requests wait while the engine sleeps"
        );
        assert_eq!(
            engine.scheduler().pool().num_used(),
            0,
            "every block is given back"
        );
        pollster::block_on(engine.restore_weights()).unwrap();
        pollster::block_on(engine.restore_kv_cache()).unwrap();
        finished.extend(pollster::block_on(engine.run_to_completion(|_| {})).unwrap());
        finished.sort_by_key(|s| (s.request_index, s.sample_index));
        assert_eq!(bits(&finished), straight, "{}", gpu.adapter.name);
        assert!(engine.stats().preemptions > 0);
    }
}

#[test]
fn a_step_while_asleep_names_what_sleeps_and_changes_nothing() {
    for gpu in gpus() {
        let decoder = tiny_llama(&gpu);
        let mut engine = Engine::new(&decoder, &config()).unwrap();
        let straight = bits(&run(&mut engine, &[request(0, 8)]));

        let mut engine = Engine::new(&decoder, &config()).unwrap();
        pollster::block_on(engine.sleep(SleepLevel::Offload)).unwrap();
        engine.add_request(request(0, 8)).unwrap();
        for _ in 0..2 {
            let e = pollster::block_on(engine.step()).unwrap_err();
            assert!(matches!(e, SproutError::Asleep(_)), "{e}");
            assert!(e.to_string().contains("KV cache"), "{e}");
        }
        // The KV cache awake and the weights still asleep: the weights are named.
        pollster::block_on(engine.restore_kv_cache()).unwrap();
        let e = pollster::block_on(engine.step()).unwrap_err();
        assert!(e.to_string().contains("weights"), "{e}");
        assert_eq!(engine.stats().steps, 0, "nothing was scheduled");

        pollster::block_on(engine.restore_weights()).unwrap();
        // Waking twice is nothing to do.
        pollster::block_on(engine.restore_weights()).unwrap();
        pollster::block_on(engine.restore_kv_cache()).unwrap();
        let after = pollster::block_on(engine.run_to_completion(|_| {})).unwrap();
        assert_eq!(bits(&after), straight, "{}", gpu.adapter.name);
    }
}
