// An OAUTHBEARER login callback handler for the Java client that hands over a JWT read from a
// file (JAAS option tokenFile), so tests can sign tokens themselves. Kafka's built-in handlers
// either fetch from an identity provider or build unsigned tokens.
// Use: sasl.login.callback.handler.class=FileTokenLoginHandler and
// sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required tokenFile="PATH";
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.auth.SaslExtensionsCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback;

public class FileTokenLoginHandler implements AuthenticateCallbackHandler {
    private String file;

    @Override
    public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> jaas) {
        file = (String) jaas.get(0).getOptions().get("tokenFile");
    }

    @Override
    public void handle(Callback[] callbacks) throws IOException, UnsupportedCallbackException {
        for (Callback cb : callbacks) {
            if (cb instanceof OAuthBearerTokenCallback) {
                String jwt = new String(Files.readAllBytes(Paths.get(file)), StandardCharsets.US_ASCII).trim();
                ((OAuthBearerTokenCallback) cb).token(new Token(jwt));
            } else if (!(cb instanceof SaslExtensionsCallback)) {
                throw new UnsupportedCallbackException(cb);
            }
        }
    }

    @Override
    public void close() {}

    private static final class Token implements OAuthBearerToken {
        private final String jwt;
        private final String sub;
        private final long expMs;

        Token(String jwt) {
            this.jwt = jwt;
            String payload = new String(Base64.getUrlDecoder().decode(jwt.split("\\.")[1]), StandardCharsets.UTF_8);
            Matcher s = Pattern.compile("\"sub\"\\s*:\\s*\"([^\"]*)\"").matcher(payload);
            Matcher e = Pattern.compile("\"exp\"\\s*:\\s*(\\d+)").matcher(payload);
            this.sub = s.find() ? s.group(1) : "unknown";
            this.expMs = e.find() ? Long.parseLong(e.group(1)) * 1000 : System.currentTimeMillis() + 3_600_000;
        }

        @Override public String value() { return jwt; }
        @Override public Set<String> scope() { return Collections.emptySet(); }
        @Override public long lifetimeMs() { return expMs; }
        @Override public String principalName() { return sub; }
        @Override public Long startTimeMs() { return null; }
    }
}
