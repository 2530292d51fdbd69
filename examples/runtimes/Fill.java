// Four threads each fill a HashMap with N entries (the first argument,
// 100,000 by default) and the main thread prints the total (4 * N).
// Run from source: java Fill.java [N]
import java.util.*;

public class Fill {
  public static void main(String[] args) throws Exception {
    final int n = args.length > 0 ? Integer.parseInt(args[0]) : 100000;
    List<Thread> ts = new ArrayList<>();
    long[] sizes = new long[4];
    for (int t = 0; t < 4; t++) {
      final int k = t;
      Thread th = new Thread(() -> {
        HashMap<Integer, String> m = new HashMap<>();
        for (int i = 0; i < n; i++) m.put(i, "v" + i);
        sizes[k] = m.size();
      });
      ts.add(th);
      th.start();
    }
    for (Thread th : ts) th.join();
    System.out.println(Arrays.stream(sizes).sum());
  }
}
