package occflow.iceberg;

import org.apache.iceberg.exceptions.CleanableFailure;

/**
 * A commit refused because the write's lease was not certainly live at that moment.
 *
 * <p>Not a {@code CommitFailedException}: Iceberg must not retry it. {@link CleanableFailure}:
 * nothing was committed, so Iceberg may delete the manifests it wrote for this attempt. The
 * occflow driver finds this class in the failure's cause chain and reports the attempt as
 * {@code lease_not_live}.
 */
public class LeaseNotLiveException extends RuntimeException implements CleanableFailure {
  private static final long serialVersionUID = 1L;
  private final long fence;

  public LeaseNotLiveException(String message, long fence) {
    super(message);
    this.fence = fence;
  }

  public long fence() {
    return fence;
  }
}
