"""The webhook's certificates (sj_operator.certs): made, kept while good, renewed in time, CAs overlapping;
no CA's private key in what is stored.

Time is passed in; each case moves it by days without waiting. Chains are checked with the
``cryptography`` verifier, as a TLS client (the API server) would check them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.verification import PolicyBuilder, Store

from sj_operator.certs import (
    CA_VALIDITY,
    CLOCK_SKEW,
    RENEW_SERVING_BEFORE,
    SERVING_VALIDITY,
    TLSBundle,
    issue,
    new_ca,
    not_after,
    renew,
    renewal_due,
)

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
HOSTS = ["scavenger-webhook.scavenger-system.svc", "scavenger-webhook.scavenger-system"]


def verifies(bundle: TLSBundle, host: str, at: datetime) -> bool:
    """Whether a client trusting ``bundle.ca_bundle`` accepts ``bundle.cert`` for ``host`` at ``at``."""
    store = Store(x509.load_pem_x509_certificates(bundle.ca_bundle))
    try:
        subject: x509.DNSName | x509.IPAddress
        import ipaddress
        try:
            subject = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            subject = x509.DNSName(host)
        verifier = PolicyBuilder().store(store).time(at).build_server_verifier(subject)
        verifier.verify(x509.load_pem_x509_certificate(bundle.cert), [])
        return True
    except Exception:
        return False


def test_a_new_bundle_serves_every_host_and_is_trusted() -> None:
    bundle = renew(None, HOSTS, T0)
    assert all(verifies(bundle, host, T0) for host in HOSTS)
    assert not verifies(bundle, "other.example", T0)
    assert not_after(bundle.cert) == (T0 + SERVING_VALIDITY).replace(microsecond=0)


def test_an_address_is_an_ip_subject_alternative_name() -> None:
    bundle = renew(None, ["127.0.0.1"], T0)
    assert verifies(bundle, "127.0.0.1", T0)


def test_a_good_bundle_is_kept_as_it_is() -> None:
    bundle = renew(None, HOSTS, T0)
    assert not renewal_due(bundle, HOSTS, T0 + 10 * DAY)
    assert renew(bundle, HOSTS, T0 + 10 * DAY) is bundle


@pytest.mark.parametrize(("days", "due"), [
    ((SERVING_VALIDITY - RENEW_SERVING_BEFORE).days - 1, False),
    ((SERVING_VALIDITY - RENEW_SERVING_BEFORE).days + 1, True),
])
def test_the_serving_certificate_is_renewed_a_month_before_it_ends(days: int, due: bool) -> None:
    bundle = renew(None, HOSTS, T0)
    assert renewal_due(bundle, HOSTS, T0 + days * DAY) is due


def test_a_bundle_holds_no_private_key_but_the_serving_one() -> None:
    bundle = renew(None, HOSTS, T0)
    assert set(bundle.__dict__) == {"ca_bundle", "cert", "key"}
    assert b"PRIVATE KEY" not in bundle.ca_bundle + bundle.cert
    assert bundle.key.count(b"BEGIN PRIVATE KEY") == 1


def test_renewing_the_serving_certificate_makes_a_new_ca_beside_the_old_one() -> None:
    bundle = renew(None, HOSTS, T0)
    later = T0 + (SERVING_VALIDITY - RENEW_SERVING_BEFORE + DAY)
    renewed = renew(bundle, HOSTS, later)
    cas = x509.load_pem_x509_certificates(renewed.ca_bundle)
    assert len(cas) == 2 and cas[1].public_bytes(serialization.Encoding.PEM) == bundle.ca_bundle, \
        "the new CA first, the old one still trusted"
    assert renewed.cert != bundle.cert
    assert verifies(renewed, HOSTS[0], later)
    assert not_after(renewed.cert) > not_after(bundle.cert)
    # A replica that has not reloaded yet still serves the old certificate: it verifies against the new bundle.
    assert verifies(TLSBundle(ca_bundle=renewed.ca_bundle, cert=bundle.cert, key=bundle.key), HOSTS[0], later)


def test_an_old_ca_leaves_the_bundle_once_it_has_expired() -> None:
    bundle = renew(None, HOSTS, T0)
    second_at = T0 + (SERVING_VALIDITY - RENEW_SERVING_BEFORE + DAY)
    second = renew(bundle, HOSTS, second_at)
    third_at = second_at + (SERVING_VALIDITY - RENEW_SERVING_BEFORE + DAY)  # past the first CA's end
    third = renew(second, HOSTS, third_at)
    cas = x509.load_pem_x509_certificates(third.ca_bundle)
    assert len(cas) == 2 and all(ca.not_valid_after_utc > third_at for ca in cas)


def test_a_ca_lives_as_long_as_the_one_certificate_it_signs() -> None:
    ca = x509.load_pem_x509_certificate(new_ca(T0)[0])
    assert ca.not_valid_after_utc - ca.not_valid_before_utc == CA_VALIDITY + CLOCK_SKEW == SERVING_VALIDITY + CLOCK_SKEW


def test_a_long_lived_ca_of_the_time_its_key_was_stored_is_no_longer_trusted_after_a_renewal() -> None:
    """Before 0.2 the CA lived three years and its key was in the Secret: a renewal drops it from the bundle."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "old CA")])
    old_ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
              .serial_number(1).not_valid_before(T0 - DAY).not_valid_after(T0 + 3 * 365 * DAY)
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .sign(key, hashes.SHA256())).public_bytes(serialization.Encoding.PEM)
    bundle = renew(None, HOSTS, T0)
    legacy = TLSBundle(ca_bundle=bundle.ca_bundle + old_ca, cert=bundle.cert, key=bundle.key)
    renewed = renew(legacy, ["192.0.2.2"], T0)
    assert old_ca not in renewed.ca_bundle
    assert len(x509.load_pem_x509_certificates(renewed.ca_bundle)) == 2


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    ca_cert, ca_key = new_ca(T0)
    near_end = T0 + 10 * DAY
    cert, _ = issue(ca_cert, ca_key, HOSTS, near_end)
    assert not_after(cert) == not_after(ca_cert)


@pytest.mark.parametrize("field", ["ca_bundle", "cert", "key"])
def test_an_unreadable_bundle_is_made_anew(field: str) -> None:
    bundle = renew(None, HOSTS, T0)
    broken = TLSBundle(**{**bundle.__dict__, field: b"not a PEM"})
    assert renewal_due(broken, HOSTS, T0)
    fresh = renew(broken, HOSTS, T0)
    assert verifies(fresh, HOSTS[0], T0)


def test_a_serving_certificate_of_another_ca_is_replaced() -> None:
    one, other = renew(None, HOSTS, T0), renew(None, HOSTS, T0)
    mixed = TLSBundle(ca_bundle=one.ca_bundle, cert=other.cert, key=other.key)
    assert renewal_due(mixed, HOSTS, T0)
    assert verifies(renew(mixed, HOSTS, T0), HOSTS[0], T0)


def test_no_hosts_is_refused() -> None:
    ca_cert, ca_key = new_ca(T0)
    with pytest.raises(ValueError, match="at least one host"):
        issue(ca_cert, ca_key, [], T0)


def test_a_serving_key_that_does_not_match_its_certificate_is_replaced() -> None:
    one = renew(None, HOSTS, T0)
    other = renew(one, ["192.0.2.9"], T0)
    mismatched = TLSBundle(ca_bundle=one.ca_bundle, cert=one.cert, key=other.key)
    assert renewal_due(mismatched, HOSTS, T0)
    fixed = renew(mismatched, HOSTS, T0)
    assert verifies(fixed, HOSTS[0], T0)
