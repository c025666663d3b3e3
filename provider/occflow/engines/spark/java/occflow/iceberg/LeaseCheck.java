package occflow.iceberg;

import occflow.lease.AttemptWindow;
import occflow.lease.LeaseWindow;

/**
 * The lease check a {@link LeaseFencedCatalog} runs inside each commit: the one window of the
 * catalog (a spark-submit driver: {@link #of(LeaseWindow)}) or the window of the write attempt the
 * committing thread runs (an in-process session that every write of the process shares: {@link
 * #attempt()}).
 */
@FunctionalInterface
interface LeaseCheck {
  /** Throws {@link LeaseNotLiveException} unless the lease is live for the commit of {@code what}. */
  void check(String what);

  /** The check of one window, the catalog's own. */
  static LeaseCheck of(LeaseWindow window) {
    return what -> refuse(window, what);
  }

  /** The check of the window of the attempt the committing thread runs (none: unchecked). */
  static LeaseCheck attempt() {
    return what -> {
      LeaseWindow window = AttemptWindow.current();
      if (window != null) {
        refuse(window, what);
      }
    };
  }

  private static void refuse(LeaseWindow window, String what) {
    String refusal = window.refusal();
    if (refusal != null) {
      throw new LeaseNotLiveException(
          "occflow: lease not live at the commit of " + what + ", not committing: " + refusal,
          window.fence());
    }
  }
}
