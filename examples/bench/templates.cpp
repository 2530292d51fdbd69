// A template-heavy translation unit for the compiler benchmark: g++'s cc1plus
// allocates heavily while instantiating these (containers of tuples, variants,
// recursive compile-time computations, many lambdas). Only compiled, never run.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

template <int N> struct Fib {
    static constexpr long value = Fib<N - 1>::value + Fib<N - 2>::value;
};
template <> struct Fib<1> { static constexpr long value = 1; };
template <> struct Fib<0> { static constexpr long value = 0; };

template <typename T, int N> struct Nest {
    using type = std::vector<typename Nest<T, N - 1>::type>;
};
template <typename T> struct Nest<T, 0> { using type = T; };

template <int I> struct Tag {
    std::map<std::string, std::tuple<int, double, std::string>> table;
    std::unordered_map<int, std::vector<std::optional<std::string>>> index;
    std::variant<int, std::string, std::vector<int>, std::map<int, int>> v;

    long run(int x) {
        table[std::to_string(x)] = {x, x * 0.5, std::to_string(I)};
        index[x].push_back(std::to_string(x + I));
        std::vector<int> xs(static_cast<size_t>(x % 17 + 1));
        std::iota(xs.begin(), xs.end(), I);
        std::sort(xs.begin(), xs.end(), [](int a, int b) { return a > b; });
        std::set<int> s(xs.begin(), xs.end());
        v = xs;
        long acc = std::accumulate(s.begin(), s.end(), 0L);
        std::visit([&](auto &&val) { acc += static_cast<long>(sizeof(val)); }, v);
        std::function<long(long)> f = [acc](long y) { return y + acc; };
        typename Nest<int, (I % 4) + 1>::type nested{};
        return f(Fib<(I % 20) + 5>::value) + static_cast<long>(nested.size());
    }
};

template <int... Is> long run_all(std::integer_sequence<int, Is...>, int x) {
    long total = 0;
    ((total += Tag<Is>{}.run(x)), ...);
    return total;
}

long entry(int x) {
    std::regex re("[a-z]+([0-9]*)");
    std::smatch m;
    std::string s = "abc" + std::to_string(x);
    long r = std::regex_match(s, m, re) ? static_cast<long>(m.size()) : 0;
    return r + run_all(std::make_integer_sequence<int, 30>{}, x);
}
