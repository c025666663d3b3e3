package occflow.delta;

/**
 * A Delta commit refused because the write's lease was not certainly live at that moment: thrown
 * by {@link LeaseFencedLogStore#write} before the commit file {@code _delta_log/<version>.json}
 * is written, so nothing was committed.
 *
 * <p>Not a {@code FileAlreadyExistsException}: delta-spark must not take it for a concurrent
 * commit and retry at the next version. The occflow driver and the in-process target find this
 * class in the failure's cause chain and report the attempt as {@code lease_not_live}.
 */
public class LeaseNotLiveException extends RuntimeException {
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
