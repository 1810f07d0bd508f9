// Defects in the Rust core that the fuzzers found and that wait for a native fix. Each
// flag makes the model accept today's behaviour *only in the exact situation the
// defect describes*; set it to false once the fix lands and the model demands the
// correct behaviour.
export const KNOWN: Readonly<Record<KnownDefect, boolean>> = {
  // wgpu refuses copy_buffer_to_buffer within one buffer, and every block of a segment
  // shares the segment's buffer: a copy between two blocks of one segment is recorded
  // fine, then fails the whole stream's submit with GPU_VALIDATION (DeviceBlock::
  // copy_from_on in crates/wgalloc-core/src/heap/block.rs checks only for the same block).
  sameSegmentCopy: false,
  // DeviceBlock / HostBlock recordStream accept a stream of another device; the free
  // then waits for that device's submission number on this device's counter.
  crossDeviceRecordStream: false,
  // Executor::release (crates/wgalloc-core/src/exec/executor.rs) frees the slabs and the
  // constant region but not the uniform and workspace blocks (`_uniforms`): they stay
  // active until the GC drops the executor object.
  releaseKeepsUniforms: false,
  // Stream::submit (crates/wgalloc-core/src/stream.rs) with nothing recorded returns the
  // last event without checking the device: synchronize() on an idle stream resolves
  // after the device was destroyed, where the README promises DEVICE_LOST.
  idleSubmitAfterLoss: false,
  // `new Gpu()` (or any class called directly) throws napi-rs's untyped
  // "Class contains no `constructor`, can not new it!" Error. The API fuzzer meets it
  // when a class is passed where a callback goes (profile(Gpu)).
  classConstructorUntyped: false,
  // checkPlan (Executor::check_plan, crates/wgalloc-core/src/exec/executor.rs ~411-440)
  // counts as "written by the op" only the tensors the op brings to life; an op whose
  // output is a view of a tensor that is already live (the graph declares the aliasing)
  // is reported as PLAN_INVALID "the plan places overlapping live tensors".
  checkPlanBlamesDeclaredViews: false,
  // Fixed too: op params shorter than the kernel's uniform struct (sized by naga's
  // reflection) are INVALID_ARGUMENT; they used to be zero-padded and run.
}

/** The defects listed in KNOWN. */
export type KnownDefect =
  | 'sameSegmentCopy'
  | 'crossDeviceRecordStream'
  | 'releaseKeepsUniforms'
  | 'idleSubmitAfterLoss'
  | 'classConstructorUntyped'
  | 'checkPlanBlamesDeclaredViews'
