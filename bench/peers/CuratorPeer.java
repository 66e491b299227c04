// CuratorPeer: the Apache Curator peer of election-bench. One CuratorFramework (one session) and one
// LeaderLatch per account, speaking zk-elect's line protocol so the benchmark drives all
// implementations alike:
//   SESSION <unix_ns> <negotiated_timeout_ms> | READY | LEADER <account> <token> <unix_ns>
//   LOST <account> <reason> <unix_ns>
// SIGTERM closes the client (one closeSession: the server drops every latch node at once) and exits.
//
//   java -cp <classes>:/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar CuratorPeer
//        --zk HOST:PORT --instance-id ID --accounts-file F [--root /wx-accounts] [--session-timeout-ms N]
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorPeer {
  private static final BufferedWriter out =
      new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);

  private static long unixNanos() {
    Instant now = Instant.now();
    return now.getEpochSecond() * 1_000_000_000L + now.getNano();
  }

  private static synchronized void emit(String line) {
    try {
      out.write(line);
      out.write('\n');
      out.flush();
    } catch (java.io.IOException e) {
      System.exit(1);  // the driver is gone
    }
  }

  // "/root/acc/_c_<uuid>-latch-0000000007" -> 7: the latch's sequence, our fencing-token analogue.
  private static long tokenOf(String path) {
    if (path == null || path.length() < 10) return -1;
    try {
      return Long.parseLong(path.substring(path.length() - 10));
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private static void usage(String message) {
    System.err.println("CuratorPeer: " + message);
    System.err.println("usage: CuratorPeer --zk HOST:PORT --instance-id ID --accounts-file F"
        + " [--root /wx-accounts] [--session-timeout-ms N]");
    System.exit(2);
  }

  public static void main(String[] args) throws Exception {
    String zk = null, instanceId = null, accountsFile = null, root = "/wx-accounts";
    int sessionTimeoutMs = 10000;
    for (int i = 0; i < args.length; i += 2) {
      if (i + 1 >= args.length) usage("missing value for " + args[i]);
      switch (args[i]) {
        case "--zk": zk = args[i + 1]; break;
        case "--instance-id": instanceId = args[i + 1]; break;
        case "--accounts-file": accountsFile = args[i + 1]; break;
        case "--root": root = args[i + 1]; break;
        case "--session-timeout-ms": sessionTimeoutMs = Integer.parseInt(args[i + 1]); break;
        default: usage("unknown argument " + args[i]);
      }
    }
    if (zk == null || instanceId == null || accountsFile == null) {
      usage("--zk, --instance-id and --accounts-file are required");
    }
    List<String> accounts = new ArrayList<>();
    for (String line : Files.readAllLines(Paths.get(accountsFile))) {
      if (!line.isEmpty() && !line.startsWith("#")) accounts.add(line.trim());
    }

    CuratorFramework client = CuratorFrameworkFactory.builder()
        .connectString(zk)
        .sessionTimeoutMs(sessionTimeoutMs)
        .connectionTimeoutMs(15000)
        .retryPolicy(new ExponentialBackoffRetry(100, 10))
        .build();
    Runtime.getRuntime().addShutdownHook(new Thread(client::close));
    client.start();
    if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) usage("cannot connect to " + zk);
    emit("SESSION " + unixNanos() + " "
        + client.getZookeeperClient().getZooKeeper().getSessionTimeout());

    List<LeaderLatch> latches = new ArrayList<>(accounts.size());
    for (String account : accounts) {
      LeaderLatch latch = new LeaderLatch(client, root + "/" + account, instanceId);
      latch.addListener(new LeaderLatchListener() {
        @Override public void isLeader() {
          emit("LEADER " + account + " " + tokenOf(latch.getOurPath()) + " " + unixNanos());
        }
        @Override public void notLeader() {
          emit("LOST " + account + " not_leader " + unixNanos());
        }
      });
      latches.add(latch);
      latch.start();
    }
    // READY once every latch has its node: from then on a handover only needs watches to fire.
    while (true) {
      boolean registered = true;
      for (LeaderLatch latch : latches) registered = registered && latch.getOurPath() != null;
      if (registered) break;
      Thread.sleep(5);
    }
    emit("READY");
    Thread.currentThread().join();  // until SIGTERM runs the shutdown hook
  }
}
