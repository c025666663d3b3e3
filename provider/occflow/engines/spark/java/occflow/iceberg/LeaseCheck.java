package occflow.iceberg;

/**
 * The lease check a {@link LeaseFencedCatalog} runs inside each commit: the one window of the
 * catalog (a spark-submit driver: {@link LeaseWindow}) or the window of the write attempt the
 * committing thread runs (an in-process session that every write of the process shares: {@link
 * AttemptWindow}).
 */
@FunctionalInterface
interface LeaseCheck {
  /** Throws {@link LeaseNotLiveException} unless the lease is live for the commit of {@code what}. */
  void check(String what);
}
