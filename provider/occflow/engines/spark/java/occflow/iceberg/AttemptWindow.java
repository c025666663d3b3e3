package occflow.iceberg;

import java.util.Map;

/**
 * The lease window of the write attempt this thread runs, for a {@link LeaseFencedCatalog} whose
 * scope is {@code thread}: an in-process Spark session, where one catalog serves every write of
 * the process, so the window cannot be a property of the catalog.
 *
 * <p>Why a thread-local: Spark runs a statement's commit on the driver thread that runs the
 * statement, and PySpark (pinned-thread mode, its default) gives each Python thread its own JVM
 * thread. Concurrent writes from different Python threads therefore commit on different JVM
 * threads, each of which sees only the window its own attempt set here. Iceberg carries a write's
 * snapshot properties the same way ({@code org.apache.iceberg.spark.CommitMetadata}).
 *
 * <p>The Python side (occflow/engines/spark/attempt_fence.py) sets a map of {@link
 * LeaseWindow#WINDOW}, {@link LeaseWindow#FENCE} and {@link LeaseWindow#MARGIN} for the attempt
 * and removes it afterwards. A thread with no window runs no attempt under a lease (creating a
 * table, a conformance run, a user's own statement): its commits pass unchecked, as they would
 * through the unwrapped catalog.
 */
public final class AttemptWindow {
  public static final ThreadLocal<Map<String, String>> CURRENT = new ThreadLocal<>();

  private AttemptWindow() {}

  static void check(String what) {
    Map<String, String> window = CURRENT.get();
    if (window != null) {
      LeaseWindow.fromProperties("(this thread's write attempt)", window).check(what);
    }
  }
}
