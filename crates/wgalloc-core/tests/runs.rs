//! Runs of one executor called concurrently take turns in call order: each completes with its
//! own inputs' outputs, a run given up while queued holds nothing up, and `wait: false` is the
//! one way to be refused with `EXECUTOR_BUSY`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use common::gpu;
use wgalloc_core::exec::{CompileOptions, DeviceIo, ExecGraph, Executor, RunOptions, RunOutput};

mod common;

const BYTES: usize = 1024;
/// Ops of the chain: y = x + N * w.
const N: usize = 3;

fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn compile(gpu: &wgalloc_core::Gpu) -> Executor {
    let graph = ExecGraph::parse(&common::chain_graph_json(N, BYTES)).unwrap();
    let params = HashMap::from([("w".to_string(), f32s(std::iter::repeat_n(1.0, BYTES / 4)))]);
    gpu.compile(graph, CompileOptions { params, ..Default::default() }).unwrap()
}

/// Run `k`'s input: every element `k * 1000 + i`.
fn input(k: usize) -> HashMap<String, Vec<u8>> {
    HashMap::from([("x".to_string(), f32s((0..BYTES / 4).map(|i| (k * 1000 + i) as f32)))])
}

/// What run `k` must return.
fn expected(k: usize) -> Vec<u8> {
    f32s((0..BYTES / 4).map(|i| (k * 1000 + i) as f32 + N as f32))
}

type Run<'a> = Pin<Box<dyn Future<Output = wgalloc_core::Result<RunOutput>> + 'a>>;

/// Polls every run, last first, until all completed: their results, and the order they completed in.
fn join(mut runs: Vec<Run<'_>>) -> (Vec<wgalloc_core::Result<RunOutput>>, Vec<usize>) {
    let mut done: Vec<Option<wgalloc_core::Result<RunOutput>>> = runs.iter().map(|_| None).collect();
    let mut order = Vec::new();
    pollster::block_on(std::future::poll_fn(|cx| {
        for k in (0..runs.len()).rev() {
            if done[k].is_none() {
                if let Poll::Ready(r) = runs[k].as_mut().poll(cx) {
                    done[k] = Some(r);
                    order.push(k);
                }
            }
        }
        if done.iter().all(Option::is_some) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }));
    (done.into_iter().map(Option::unwrap).collect(), order)
}

fn poll_once(run: &mut Run<'_>) -> bool {
    run.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready()
}

#[test]
fn concurrent_runs_of_one_executor_queue_in_call_order_and_each_returns_its_own_outputs() {
    let gpu = gpu();
    let exe = compile(&gpu);
    let inputs: Vec<_> = (0..4).map(input).collect();
    // Claimed in call order 0..4, polled in the reverse order: turns follow the claims.
    let claims: Vec<_> = (0..4).map(|_| Executor::claim(&exe, true).unwrap()).collect();
    let io = DeviceIo::default();
    let mut runs: Vec<Run<'_>> = claims
        .into_iter()
        .zip(&inputs)
        .map(|(c, x)| Box::pin(c.run_io(x, &io, RunOptions::default())) as Run<'_>)
        .collect();
    assert!(!poll_once(&mut runs[3]), "the last call waits for the earlier ones, though polled first");
    let (results, order) = join(runs);
    assert_eq!(order, [0, 1, 2, 3], "completed in call order");
    for (k, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap().outputs[0].1, expected(k), "run {k}");
    }
    assert_eq!(exe.stats().runs, 4);
    // Plain concurrent calls too (each claims when first polled).
    let runs: Vec<Run<'_>> = inputs.iter().map(|x| Box::pin(exe.run(x, RunOptions::default())) as Run<'_>).collect();
    let (results, _) = join(runs);
    for (k, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap().outputs[0].1, expected(k), "plain run {k}");
    }
}

#[test]
fn a_run_given_up_while_queued_holds_nothing_up_and_wait_false_is_refused_while_busy() {
    let gpu = gpu();
    let exe = compile(&gpu);
    let (x0, x1) = (input(0), input(1));
    let first = Executor::claim(&exe, true).unwrap();
    let given_up = Executor::claim(&exe, true).unwrap();
    let third = Executor::claim(&exe, true).unwrap();
    // Busy while any run is queued or in flight: refused at once, naming the option.
    let busy = Executor::claim(&exe, false).map(drop).unwrap_err();
    assert_eq!(busy.code(), "EXECUTOR_BUSY");
    assert!(busy.to_string().contains("wait: false"), "{busy}");
    let no_wait = RunOptions { wait: false, ..Default::default() };
    assert_eq!(pollster::block_on(exe.run(&x0, no_wait.clone())).unwrap_err().code(), "EXECUTOR_BUSY");
    let io = DeviceIo::default();
    let mut queued: Run<'_> = Box::pin(given_up.run_io(&x0, &io, RunOptions::default()));
    assert!(!poll_once(&mut queued));
    drop(queued); // its caller went away while it waited
    let (results, order) = join(vec![
        Box::pin(first.run_io(&x0, &io, RunOptions::default())),
        Box::pin(third.run_io(&x1, &io, RunOptions::default())),
    ]);
    assert_eq!(order, [0, 1]);
    assert_eq!(results[0].as_ref().unwrap().outputs[0].1, expected(0));
    assert_eq!(results[1].as_ref().unwrap().outputs[0].1, expected(1));
    // Idle again: wait: false runs.
    assert_eq!(pollster::block_on(exe.run(&x1, no_wait)).unwrap().outputs[0].1, expected(1));
}

#[test]
fn release_while_runs_are_queued_lets_them_run_and_frees_the_slabs_after_the_last() {
    let gpu = gpu();
    let heap = gpu.heap().unwrap();
    let before = heap.stats().allocated_bytes.current;
    let exe = compile(&gpu);
    assert!(heap.stats().allocated_bytes.current > before);
    let inputs: Vec<_> = (0..3).map(input).collect();
    let claims: Vec<_> = (0..3).map(|_| Executor::claim(&exe, true).unwrap()).collect();
    assert!(exe.release());
    assert_eq!(Executor::claim(&exe, true).map(drop).unwrap_err().code(), "USE_AFTER_FREE");
    let io = DeviceIo::default();
    let runs: Vec<Run<'_>> = claims
        .into_iter()
        .zip(&inputs)
        .map(|(c, x)| Box::pin(c.run_io(x, &io, RunOptions::default())) as Run<'_>)
        .collect();
    let (results, order) = join(runs);
    assert_eq!(order, [0, 1, 2]);
    for (k, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap().outputs[0].1, expected(k), "run {k}");
    }
    assert_eq!(heap.stats().allocated_bytes.current, before, "the last run freed the slabs");
}
