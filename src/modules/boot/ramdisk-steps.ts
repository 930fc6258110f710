/**
 * The ramdisk's step that ends its wipes (docs/boot.md): its outcome ends a wipe step's wait
 * (jobs/workflows/common.ts wipeOver), so its report wakes the run (reports.ts reportWakesRun). A
 * module of its own: the workflows read it without importing the report routes' module graph.
 */
export const WIPE_STEP = 'erase-devices';
