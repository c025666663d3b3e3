package occflow.lease;

import java.util.Map;

/**
 * The lease window of the write attempt this thread runs, for a lease fence whose scope is {@code
 * thread}: an in-process Spark session, where one Iceberg catalog ({@code
 * occflow.iceberg.LeaseFencedCatalog}) or one Delta log store ({@code
 * occflow.delta.LeaseFencedLogStore}) serves every write of the process, so the window cannot be
 * one setting of the session.
 *
 * <p>Why a thread-local: Spark runs a statement's commit on the driver thread that runs the
 * statement (Iceberg's {@code TableOperations.commit}, delta-spark's {@code LogStore.write} of the
 * commit file), and PySpark (pinned-thread mode, its default) gives each Python thread its own JVM
 * thread. Concurrent writes from different Python threads therefore commit on different JVM
 * threads, each of which sees only the window its own attempt set here. Iceberg carries a write's
 * snapshot properties the same way ({@code org.apache.iceberg.spark.CommitMetadata}).
 *
 * <p>The Python side (occflow/engines/spark/attempt_fence.py) sets a map of {@link
 * LeaseWindow#WINDOW}, {@link LeaseWindow#FENCE} and {@link LeaseWindow#MARGIN} for the attempt
 * and removes it afterwards. A thread with no window runs no attempt under a lease (creating a
 * table, a conformance run, a user's own statement): its commits pass unchecked, as they would
 * through the unwrapped catalog or log store.
 */
public final class AttemptWindow {
  public static final ThreadLocal<Map<String, String>> CURRENT = new ThreadLocal<>();

  private AttemptWindow() {}

  /** The window of the attempt this thread runs, or null when it runs none. */
  public static LeaseWindow current() {
    Map<String, String> window = CURRENT.get();
    return window == null ? null : LeaseWindow.fromProperties("(this thread's write attempt)", window);
  }
}
