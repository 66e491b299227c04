// What a device token costs the agent per connect: auth::Verifier::verify for each algorithm the
// edges accept (the test keys of scripts/make-test-certs), one valid token each, verified again
// and again. The device endpoint verifies once per upgrade (and not again until the token expires).
#include <benchmark/benchmark.h>

#include "zkagent/auth.hpp"
#include "zktest/test_certs.hpp"

namespace {

using namespace zkagent::auth;

void verify(benchmark::State& state, Algorithm algorithm, const char* publicKey,
            const char* privateKey) {
  Verifier verifier(
      VerifierSettings{{{"k1", algorithm, zktest::tokenKey(publicKey)}}, "zkagent", {}});
  TokenRequest request;
  request.subject = "phone-1";
  request.account = "acct-1";
  request.scope = "device";
  request.audience = "zkagent";
  request.expiresAt = unixNow() + 3600;
  const std::string token = mint({"k1", algorithm, zktest::tokenKey(privateKey)}, request);
  for (auto _ : state) {
    auto result = verifier.verify(token, "device", unixNow());
    if (!std::holds_alternative<Claims>(result)) state.SkipWithError("token refused");
    benchmark::DoNotOptimize(result);
  }
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK_CAPTURE(verify, HS256, Algorithm::HS256, "hs256.secret", "hs256.secret");
BENCHMARK_CAPTURE(verify, RS256, Algorithm::RS256, "rs256.pub", "rs256.key");
BENCHMARK_CAPTURE(verify, ES256, Algorithm::ES256, "es256.pub", "es256.key");

}  // namespace

BENCHMARK_MAIN();
