//! Rows of logits: which rows of a step's chunks need them, and what each such row draws
//! or scores. A step computes at most `max_num_seqs` rows of logits, so the scheduler
//! fits its chunks to the rows left as well as to the token budget.
//!
//! - A drawing sequence needs the row of its last token, once a chunk reaches it: a root's
//!   row draws the first token of each of its `n` samples, a sample's its next token, and
//!   each row of a drafted chunk the token after the draft's tokens before it.
//! - A scoring sample needs a row for every position whose next token it has not scored;
//!   a scoring request's root scores the first token of each completion from its last row.
//!
//! Invariant: a chunk's draws and targets use exactly the [`rows_needed`] rows; a draw's
//! random key and position name the token it draws, so that the same draw gives the same
//! token in whatever step and batch it runs.

use std::sync::Arc;

use super::plan::{Chunk, Draw, Target};
use super::processing::{Processors, RowProcessing};
use super::request::Request;
use super::sequence::{Role, Sequence};

/// How many of `seq`'s uncomputed tokens to take within `budget` tokens and `rows_left >
/// 0` rows of logits: a scored token needs a row, and so does the last token of a
/// sequence that draws.
pub(crate) fn fit_rows(seq: &Sequence, budget: usize, rows_left: usize) -> usize {
    if seq.awaiting_draw {
        return 0;
    }
    let want = seq.num_uncomputed().min(budget);
    let start = seq.num_computed_tokens;
    if seq.scoring {
        let free = seq.next_target_position().saturating_sub(start);
        want.min(free + rows_left)
    } else {
        want
    }
}

/// The rows of logits `seq`'s `chunk` needs.
pub(crate) fn rows_needed(seq: &Sequence, chunk: &Chunk) -> usize {
    if seq.scoring {
        let first = seq.next_target_position().max(chunk.start);
        chunk.end().saturating_sub(first)
    } else if chunk.end() >= seq.compute_len() {
        1 + chunk.drafted
    } else {
        0
    }
}

/// Adds the draws and targets of chunk `c` of a plan, `seq`'s `chunk` of `request`. A chunk
/// that reaches its sequence's last token draws: `n` tokens for a root (its samples), one
/// for a sample. A scoring request's root scores the first token of each completion
/// instead, and a scoring sample scores each of its tokens past the prompt. Each drawing
/// row gets its logit processing from `processors`.
pub(crate) fn add_draws_and_targets(
    c: usize,
    chunk: &Chunk,
    seq: &Sequence,
    request: &Request,
    processors: &Processors,
    draws: &mut Vec<Draw>,
    targets: &mut Vec<Target>,
) {
    if seq.scoring {
        let Role::Sample(k) = seq.role else {
            unreachable!("only samples score")
        };
        for p in seq.next_target_position().max(chunk.start)..chunk.end() {
            targets.push(Target {
                chunk: c,
                offset: p - chunk.start,
                token: seq.tokens[p + 1],
                sample_index: k,
                top_logprobs: request.params.top_logprobs,
            });
        }
        return;
    }
    if chunk.end() < seq.tokens.len() {
        return;
    }
    if let (Role::Sample(k), true) = (seq.role, chunk.drafted > 0) {
        // Row i draws the token after the draft's first i tokens, processed as if those
        // had been drawn.
        let first = chunk.tokens.len() - 1 - chunk.drafted;
        let generated = seq.generated().len();
        for i in 0..=chunk.drafted {
            let drafted = &chunk.tokens[first + 1..first + 1 + i];
            let processing = row_processing(seq, request, processors, drafted);
            draws.push(make_draw(
                c,
                first + i,
                seq,
                request,
                k,
                generated + i,
                processing,
            ));
        }
        return;
    }
    let samples = match seq.role {
        Role::Root => 0..request.n as u32,
        Role::Sample(k) => k..k + 1,
    };
    // A root's draws are all first tokens: they share one processing.
    let processing = match request.forced.is_empty() {
        true => row_processing(seq, request, processors, &[]),
        false => Arc::default(),
    };
    for sample_index in samples {
        if !request.forced.is_empty() {
            targets.push(Target {
                chunk: c,
                offset: chunk.tokens.len() - 1,
                token: request.forced[sample_index as usize][0],
                sample_index,
                top_logprobs: request.params.top_logprobs,
            });
            continue;
        }
        let (last, generated) = (chunk.tokens.len() - 1, seq.generated().len());
        let processing = processing.clone();
        draws.push(make_draw(
            c,
            last,
            seq,
            request,
            sample_index,
            generated,
            processing,
        ));
    }
}

/// The processing of `seq`'s row drawing the token after its generated tokens and then
/// `drafted`.
fn row_processing(
    seq: &Sequence,
    request: &Request,
    processors: &Processors,
    drafted: &[u32],
) -> Arc<RowProcessing> {
    let (generated, counts) = (seq.generated(), &seq.output_counts);
    Arc::new(processors.for_row(&request.params, generated, counts, drafted))
}

/// The draw of sample `sample_index` of `seq`'s request from row `offset` of chunk `c`, of
/// the token after its first `generated` ones, the row processed by `processing`.
fn make_draw(
    c: usize,
    offset: usize,
    seq: &Sequence,
    request: &Request,
    sample_index: u32,
    generated: usize,
    processing: Arc<RowProcessing>,
) -> Draw {
    let params = &request.params;
    Draw {
        chunk: c,
        offset,
        request: seq.request,
        request_index: request.index,
        sample_index,
        key_index: params.key_index(request.index),
        position: (seq.prompt_len + generated) as u32,
        seed: params.seed,
        temperature: params.temperature,
        top_k: params.top_k,
        top_p: params.top_p,
        min_p: params.min_p,
        processing,
        top_logprobs: params.top_logprobs,
    }
}
