package occflow.iceberg;

import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DeleteFiles;
import org.apache.iceberg.ExpireSnapshots;
import org.apache.iceberg.ManageSnapshots;
import org.apache.iceberg.OverwriteFiles;
import org.apache.iceberg.ReplacePartitions;
import org.apache.iceberg.ReplaceSortOrder;
import org.apache.iceberg.RewriteFiles;
import org.apache.iceberg.RewriteManifests;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Table;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.UpdateLocation;
import org.apache.iceberg.UpdatePartitionSpec;
import org.apache.iceberg.UpdatePartitionStatistics;
import org.apache.iceberg.UpdateProperties;
import org.apache.iceberg.UpdateSchema;
import org.apache.iceberg.UpdateStatistics;

/**
 * A create / replace transaction (CREATE TABLE AS SELECT, REPLACE TABLE AS SELECT) with the lease
 * checked in {@link #commitTransaction}: the catalog commits it through operations of its own,
 * which {@link LeaseFencedOperations} does not wrap.
 */
final class LeaseFencedTransaction implements Transaction {
  private final Transaction delegate;
  private final LeaseCheck window;
  private final String table;

  LeaseFencedTransaction(Transaction delegate, LeaseCheck window, String table) {
    this.delegate = delegate;
    this.window = window;
    this.table = table;
  }

  @Override
  public void commitTransaction() {
    window.check(table);
    delegate.commitTransaction();
  }

  @Override
  public Table table() {
    return delegate.table();
  }

  @Override
  public UpdateSchema updateSchema() {
    return delegate.updateSchema();
  }

  @Override
  public UpdatePartitionSpec updateSpec() {
    return delegate.updateSpec();
  }

  @Override
  public UpdateProperties updateProperties() {
    return delegate.updateProperties();
  }

  @Override
  public ReplaceSortOrder replaceSortOrder() {
    return delegate.replaceSortOrder();
  }

  @Override
  public UpdateLocation updateLocation() {
    return delegate.updateLocation();
  }

  @Override
  public AppendFiles newAppend() {
    return delegate.newAppend();
  }

  @Override
  public AppendFiles newFastAppend() {
    return delegate.newFastAppend();
  }

  @Override
  public RewriteFiles newRewrite() {
    return delegate.newRewrite();
  }

  @Override
  public RewriteManifests rewriteManifests() {
    return delegate.rewriteManifests();
  }

  @Override
  public OverwriteFiles newOverwrite() {
    return delegate.newOverwrite();
  }

  @Override
  public RowDelta newRowDelta() {
    return delegate.newRowDelta();
  }

  @Override
  public ReplacePartitions newReplacePartitions() {
    return delegate.newReplacePartitions();
  }

  @Override
  public DeleteFiles newDelete() {
    return delegate.newDelete();
  }

  @Override
  public UpdateStatistics updateStatistics() {
    return delegate.updateStatistics();
  }

  @Override
  public UpdatePartitionStatistics updatePartitionStatistics() {
    return delegate.updatePartitionStatistics();
  }

  @Override
  public ExpireSnapshots expireSnapshots() {
    return delegate.expireSnapshots();
  }

  @Override
  public ManageSnapshots manageSnapshots() {
    return delegate.manageSnapshots();
  }
}
